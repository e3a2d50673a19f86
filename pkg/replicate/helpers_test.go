package replicate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/replicate"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// serve starts a server on the SQLite store at path and a client of it.
func serve(t *testing.T, path string) (*endpoint.Server, *clientv3.Client) {
	t.Helper()
	s, err := endpoint.Start(t.Context(), endpoint.Config{Listener: "127.0.0.1:0", Endpoint: "sqlite://" + path})
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s, c
}

func dialect(t *testing.T, path string) *sqlite.Dialect {
	t.Helper()
	md, err := endpoint.NewDialect(endpoint.Config{Endpoint: "sqlite://" + path})
	if err != nil {
		t.Fatal(err)
	}
	return md.(*sqlite.Dialect)
}

func bucket(t *testing.T, dir string) objstore.Store {
	t.Helper()
	st, err := objstore.Open(t.Context(), "file://"+dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// startReplicator ships path to st every 10 ms (a test's interval: the
// default is 1 s).
func startReplicator(t *testing.T, path string, st objstore.Store) *replicate.Replicator {
	t.Helper()
	r, err := replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, path), Store: st, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitShipped waits until r has shipped rev, failing after a bound.
func waitShipped(t *testing.T, r *replicate.Replicator, rev int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for r.Status().Shipped < rev {
		if time.Now().After(deadline) {
			t.Fatalf("replicator shipped %d, not %d, in 20 s: last error %v", r.Status().Shipped, rev, r.Status().LastErr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// workload writes n random changes on a few keys (puts, deletes, puts with
// a lease, multi-key transactions) and returns the revision after each.
func workload(t *testing.T, c *clientv3.Client, rng *rand.Rand, n int) []int64 {
	t.Helper()
	ctx := t.Context()
	lease, err := c.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	revs := make([]int64, 0, n)
	for i := range n {
		k := fmt.Sprintf("/k/%02d", rng.IntN(20))
		var rev int64
		switch rng.IntN(10) {
		case 0:
			r, err := c.Delete(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		case 1:
			r, err := c.Put(ctx, k, fmt.Sprintf("leased %d", i), clientv3.WithLease(lease.ID))
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		case 2:
			r, err := c.Txn(ctx).Then(clientv3.OpPut(k, fmt.Sprintf("txn %d", i)), clientv3.OpPut(k+"/b", ""), clientv3.OpDelete("/x/05")).Commit()
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		default:
			r, err := c.Put(ctx, k, fmt.Sprintf("v %d", i))
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		}
		revs = append(revs, rev)
	}
	return revs
}

// state reads every key at rev (0: latest).
func state(t *testing.T, c *clientv3.Client, rev int64) (int64, string) {
	t.Helper()
	r, err := c.Get(t.Context(), "", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("get at %d: %v", rev, err)
	}
	s := ""
	for _, kv := range r.Kvs {
		s += fmt.Sprintf("%q=%q c%d m%d v%d l%x\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return r.Header.Revision, s
}

// restored restores the bucket at t into a new store and serves it.
func restored(t *testing.T, st objstore.Store, target replicate.Target) (*clientv3.Client, replicate.RestoreInfo) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "restored.db")
	info, err := replicate.Restore(context.Background(), st, dialect(t, path), target, false)
	if err != nil {
		t.Fatalf("restore %+v: %v", target, err)
	}
	_, c := serve(t, path)
	return c, info
}

// historyState reads the whole key space at unix ms ms through the
// original's History service (Get of the range from \x00 to the end, a
// page of 7 keys at a time, so that continue tokens are followed) and
// formats it as state does, with the revision History resolved ms to.
func historyState(t *testing.T, c *clientv3.Client, ms int64) (int64, string) {
	t.Helper()
	h := historypb.NewHistoryClient(c.ActiveConnection())
	req := &historypb.Request{Key: []byte{0}, RangeEnd: []byte{0}, UnixMs: ms, Limit: 7}
	var rev int64
	s := ""
	for {
		resp, err := h.Get(t.Context(), req)
		if err != nil {
			t.Fatalf("History Get at %d ms: %v", ms, err)
		}
		if rev != 0 && resp.Revision != rev {
			t.Fatalf("History Get at %d ms: a page of revision %d after %d", ms, resp.Revision, rev)
		}
		rev = resp.Revision
		for _, kv := range resp.Kvs {
			s += fmt.Sprintf("%q=%q c%d m%d v%d l%x\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
		}
		if resp.Continue == "" {
			return rev, s
		}
		req.Continue = resp.Continue
	}
}

// reader opens the SQLite store at path read-only, as `quantykube check
// hash` does.
func reader(t *testing.T, path string) *mvcc.Reader {
	t.Helper()
	r, err := mvcc.OpenReader(t.Context(), dialect(t, path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// waitBaseDue waits, once retention's floor has passed shipped+1 while the
// bucket is away, until the replicator has decided on a fresh base, and
// returns the revision of the write that made it see the floor. A batch
// it read before the floor rose holds every row and may still be on its
// way, a segment with no gap: one more write, read while the bucket is
// still away, makes it see the floor.
func waitBaseDue(t *testing.T, c *clientv3.Client, r *replicate.Replicator, shipped int64) int64 {
	t.Helper()
	resp, err := c.Put(t.Context(), "/k/after-floor", "x")
	if err != nil {
		t.Fatal(err)
	}
	last := resp.Header.Revision
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := r.Status()
		if st.BaseDue {
			return last
		}
		if st.StoreRev >= last || time.Now().After(deadline) {
			t.Fatalf("replicator read revision %d (floor past %d at %d) and takes no fresh base", st.StoreRev, shipped+1, last)
		}
	}
}

// bucketAway makes the file:// bucket at bdir unreachable: a file stands
// where its directory was, so every PUT fails.
func bucketAway(t *testing.T, bdir string) {
	t.Helper()
	if err := os.Rename(bdir, bdir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bdir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// bucketBack puts the bucket bucketAway took away back.
func bucketBack(t *testing.T, bdir string) {
	t.Helper()
	if err := os.Remove(bdir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bdir+".away", bdir); err != nil {
		t.Fatal(err)
	}
}
