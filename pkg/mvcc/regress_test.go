package mvcc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// putRetry writes key, retrying for a while as a client does: the first
// attempts after a failover may meet connections it broke.
func putRetry(t *testing.T, ctx context.Context, s *mvcc.Store, key string) int64 {
	t.Helper()
	for began := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		r, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte("v")}}}}})
		if err == nil {
			return r.Header.Revision
		}
		if time.Since(began) > 15*time.Second {
			t.Fatalf("put %s: %v", key, err)
		}
	}
}

// counter is a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A store whose database lost revisions it had acknowledged (a failover
// to a standby that was behind) never hands one of them out again: the
// database's revision moves past them by RevisionBump and is marked
// compacted, so what watched the lost revisions is cancelled; reads answer
// what the database holds; the metrics count it; the other replica
// follows. (It used to hand out the lost revisions again.)
//
// Whichever notices first moves it: a write's batch, a read's fence, or
// the tailer when its connection comes back.
func TestRevisionNeverReusedAfterLoss(t *testing.T) {
	for _, first := range []string{"write", "read", "read from SQL", "tailer"} {
		t.Run(first, func(t *testing.T) { testRevisionNeverReused(t, first) })
	}
}

func testRevisionNeverReused(t *testing.T, first string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := framework.PostgresDatabase(t)
	// Without the live index every read's header comes from SQL.
	opts := mvcc.Options{PruneInterval: time.Hour, DisableLiveIndex: first == "read from SQL"}
	a := openReplica(t, ctx, dialect(t, dsn), opts)
	b := openReplica(t, ctx, dialect(t, dsn), opts)

	kept := map[string]int64{}
	for i := range 5 {
		key := fmt.Sprintf("/f/kept/%d", i)
		kept[key] = putKey(t, ctx, a, key, "v", 0)
	}
	standby := putKey(t, ctx, a, "/f/changed", "old", 0)
	if err := pgtest.SaveStandby(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	var acked int64
	for i := range 20 {
		acked = putKey(t, ctx, a, fmt.Sprintf("/f/lost/%d", i), "v", 0)
	}
	putKey(t, ctx, a, "/f/changed", "new", 0)
	acked = putKey(t, ctx, b, "/f/lost/b", "v", 0)
	eventually(t, "a publishes b's write", func() bool { got, _, _ := a.Published(); return got >= acked })
	regressions := counter(t, metrics.RevisionRegressions)
	lost := counter(t, metrics.RevisionsLost)

	if err := pgtest.Failover(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	switch first {
	case "read", "read from SQL":
		for ; ; time.Sleep(10 * time.Millisecond) {
			r, err := a.Range(ctx, &pb.RangeRequest{Key: []byte("/f/lost/0")})
			if err == nil {
				if len(r.Kvs) != 0 || r.Rev <= acked {
					t.Fatalf("a read after the failover: %v at revision %d (%d acknowledged)", r.Kvs, r.Rev, acked)
				}
				break
			}
			if time.Since(began) > 15*time.Second {
				t.Fatalf("no read succeeds after the failover: %v", err)
			}
		}
	case "tailer":
		eventually(t, "a's tailer moves the revision", func() bool { return a.Floor() > acked })
	}
	t.Logf("%s: serving again %v after the failover", first, time.Since(began).Round(time.Millisecond))
	rev := putRetry(t, ctx, a, "/f/after")
	t.Logf("first write after the failover: revision %d, %v after it (database at %d, %d acknowledged)", rev, time.Since(began).Round(time.Millisecond), standby, acked)
	if rev <= acked+mvcc.RevisionBump {
		t.Fatalf("a write after losing revisions %d..%d got revision %d: want one past %d", standby+1, acked, rev, acked+mvcc.RevisionBump)
	}
	if got := counter(t, metrics.RevisionRegressions) - regressions; got != 1 {
		t.Errorf("regressions counted: %v, want 1", got)
	}
	if got := counter(t, metrics.RevisionsLost) - lost; got != float64(acked-standby) {
		t.Errorf("lost revisions counted: %v, want %d", got, acked-standby)
	}

	floor := rev - 1
	for _, s := range []struct {
		name string
		s    *mvcc.Store
	}{{"a", a}, {"b", b}} {
		eventually(t, s.name+" follows", func() bool { got, _, _ := s.s.Published(); return got >= rev })
		if f := s.s.Floor(); f != floor {
			t.Errorf("%s: floor %d, want %d", s.name, f, floor)
		}
		// A watcher that stood anywhere before the bump is cancelled.
		for _, from := range []int64{standby + 1, acked + 1} {
			_, _, err := s.s.Events(ctx, from, floor, mvcc.NewKeyRange([]byte("/f/"), []byte("/f0")))
			if below := (*mvcc.BelowFloorError)(nil); !errors.As(err, &below) || below.Floor != floor {
				t.Errorf("%s: a watcher at %d reads %v: want it below the floor %d", s.name, from, err, floor)
			}
		}
		// Reads answer what the database holds, nothing of what it lost.
		for _, serializable := range []bool{false, true} {
			r, err := s.s.Range(ctx, &pb.RangeRequest{Key: []byte("/f/"), RangeEnd: []byte("/f0"), Serializable: serializable})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, kv := range r.Kvs {
				got[string(kv.Key)] = string(kv.Value)
			}
			want := map[string]string{"/f/changed": "old", "/f/after": "v"}
			for k := range kept {
				want[k] = "v"
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || r.Rev != rev {
				t.Errorf("%s (serializable %v): read %v at %d, want %v at %d", s.name, serializable, got, r.Rev, want, rev)
			}
		}
		if _, err := s.s.Range(ctx, &pb.RangeRequest{Key: []byte("/f/changed"), Revision: acked}); !errors.Is(err, mvcc.ErrCompacted) {
			t.Errorf("%s: a read at a lost revision: %v, want compacted", s.name, err)
		}
	}
	// Both write on from there, and neither hands a revision out twice.
	if r := putRetry(t, ctx, b, "/f/after/b"); r != rev+1 {
		t.Errorf("b's write after a's: revision %d, want %d", r, rev+1)
	}
}
