package history_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func openTypeStore(t *testing.T) (*mvcc.Store, func(key string, size int)) {
	t.Helper()
	ctx := context.Background()
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, func(key string, size int) {
		t.Helper()
		v := make([]byte, size)
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: v}}}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// The metrics by type count a store whose churn is known exactly: node
// leases renewed 300 times, ConfigMaps written twice each, a large Secret
// once, a key that holds no object; the types past the largest are summed
// as "other".
func TestTypeUsageFindsTheChurn(t *testing.T) {
	s, put := openTypeStore(t)
	const leaseKey = "/registry/leases/kube-node-lease/node-%d"
	for i := range 300 {
		put(fmt.Sprintf(leaseKey, i%3), 100)
	}
	cm := 0
	for i := range 4 {
		for range 2 {
			k := fmt.Sprintf("/registry/configmaps/default/cm-%d", i)
			put(k, 1000)
			cm += len(k) + 1000
		}
	}
	put("/registry/secrets/prod/big", 50000)
	put("/registry/masterleases/10.0.0.1", 10)

	got, err := history.New(s).TypeUsage(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	master := len("/registry/masterleases/10.0.0.1") + 10
	want := []metrics.TypeUsage{
		{Type: "secrets", Bytes: int64(len("/registry/secrets/prod/big") + 50000), Revisions: 1, LastHour: 1},
		{Type: "leases.coordination.k8s.io", Bytes: int64(300 * (len(fmt.Sprintf(leaseKey, 0)) + 100)), Revisions: 300, LastHour: 300},
		{Type: history.OtherType, Bytes: int64(cm + master), Revisions: 9, LastHour: 9},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("types:\n got %v\nwant %v", got, want)
	}
	all, err := history.New(s).TypeUsage(context.Background(), history.MetricTypes)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || all[2].Type != "configmaps" || all[2].Revisions != 8 || all[3].Type != "/registry/masterleases/" {
		t.Errorf("four types, no other: %v", all)
	}
}

// However many types the store holds, the metrics have at most
// MetricTypes+1 series each (the rest summed as "other", nothing lost),
// and a refresh leaves no series of a type that is no longer among them.
func TestTypeMetricsAreBounded(t *testing.T) {
	s, put := openTypeStore(t)
	const types = 3 * history.MetricTypes
	for i := range types {
		// Custom resources, each its own type; type i is written i+1 times.
		for j := range i + 1 {
			put(fmt.Sprintf("/registry/example.com/res%02d/ns/obj-%d", i, j%2), 200)
		}
	}
	svc := history.New(s)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.HistoryTypes)
	series := func() map[string]int {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, mf := range mfs {
			n[mf.GetName()] = len(mf.GetMetric())
		}
		return n
	}
	got, err := svc.TypeUsage(context.Background(), history.MetricTypes)
	if err != nil {
		t.Fatal(err)
	}
	var revs int64
	for _, u := range got {
		revs += u.Revisions
	}
	if len(got) != history.MetricTypes+1 || got[0].Type != fmt.Sprintf("res%02d.example.com", types-1) || got[len(got)-1].Type != history.OtherType {
		t.Errorf("want the %d largest and other: %v", history.MetricTypes, got)
	}
	if want := int64(types * (types + 1) / 2); revs != want {
		t.Errorf("the series add up to %d revisions, want all %d", revs, want)
	}
	metrics.HistoryTypes.Set(got, time.Millisecond)
	for _, name := range []string{"quantykube_history_type_bytes", "quantykube_history_type_revisions", "quantykube_history_type_revisions_last_hour"} {
		if n := series()[name]; n != history.MetricTypes+1 {
			t.Errorf("%s: %d series, want %d", name, n, history.MetricTypes+1)
		}
	}
	// A refresh with fewer types drops the others' series.
	metrics.HistoryTypes.Set(got[:2], time.Millisecond)
	if n := series()["quantykube_history_type_bytes"]; n != 2 {
		t.Errorf("after a refresh with 2 types: %d series", n)
	}
}
