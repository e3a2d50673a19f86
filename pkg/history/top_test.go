package history_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// Top finds a lease storm: a store whose churn is known (node leases
// renewed 300 times, a few ConfigMaps written twice, a large Secret once,
// a key that holds no object) answers with exactly those revisions and
// bytes, largest first by the measure asked for.
func TestTopFindsTheChurn(t *testing.T) {
	ctx := context.Background()
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(key string, size int) {
		t.Helper()
		v := make([]byte, size)
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: v}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	const leaseKey = "/registry/leases/kube-node-lease/node-%d"
	for i := range 300 {
		put(fmt.Sprintf(leaseKey, i%3), 100)
	}
	for i := range 4 {
		for range 2 {
			put(fmt.Sprintf("/registry/configmaps/default/cm-%d", i), 1000)
		}
	}
	put("/registry/secrets/prod/big", 50000)
	put("/registry/masterleases/10.0.0.1", 10)

	svc := history.New(s)
	byBytes, err := svc.Top(ctx, &historypb.TopRequest{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	lease0 := fmt.Sprintf(leaseKey, 0)
	leaseBytes := int64(300 * (len(lease0) + 100))
	want := func(what string, got []*historypb.Usage, names []string, revs []int64, bytes []int64) {
		t.Helper()
		if len(got) != len(names) {
			t.Fatalf("%s: %d rows %v, want %v", what, len(got), got, names)
		}
		for i, u := range got {
			if u.Name != names[i] || u.Revisions != revs[i] || (bytes != nil && u.Bytes != bytes[i]) {
				t.Errorf("%s row %d: %s %d revisions %d bytes, want %s %d %v", what, i, u.Name, u.Revisions, u.Bytes, names[i], revs[i], bytes)
			}
		}
	}
	secret := int64(len("/registry/secrets/prod/big") + 50000)
	want("types by bytes", byBytes.Types, []string{"secrets", "leases.coordination.k8s.io"}, []int64{1, 300}, []int64{secret, leaseBytes})
	want("keys by bytes", byBytes.Keys, []string{"/registry/secrets/prod/big", lease0}, []int64{1, 100}, nil)
	if tot := byBytes.Total; tot.Revisions != 310 || tot.RevisionsLastHour != 310 {
		t.Errorf("total: %v, want 310 revisions, all in the last hour", tot)
	}

	byRevs, err := svc.Top(ctx, &historypb.TopRequest{By: "revisions", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	want("types by revisions", byRevs.Types, []string{"leases.coordination.k8s.io", "configmaps", "/registry/masterleases/"}, []int64{300, 8, 1}, nil)
	want("namespaces by revisions", byRevs.Namespaces, []string{"leases.coordination.k8s.io in kube-node-lease", "configmaps in default", "secrets in prod"}, []int64{300, 8, 1}, nil)
	if byRevs.Types[0].RevisionsLastHour != 300 {
		t.Errorf("leases changed %d times in the last hour, want 300", byRevs.Types[0].RevisionsLastHour)
	}

	for _, r := range []*historypb.TopRequest{{By: "size"}, {Limit: -1}, {Limit: history.MaxTopLimit + 1}} {
		_, err := svc.Top(ctx, r)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "want") {
			t.Errorf("Top(%v): %v, want InvalidArgument saying what it wants", r, err)
		}
	}
}
