package mvcc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// A replica whose tailer falls behind while another replica prunes the
// history it has not read yet moves on to the retention floor, as etcd
// does past a compaction: a watcher still behind it is told the floor,
// and the replica follows the writes after it. (It used to retry reading
// the pruned revisions forever, its watchers and reads stuck.)
func TestReplicaBehindRetentionMovesOn(t *testing.T) {
	srv, err := framework.PostgresServer()
	if err != nil {
		framework.Unavailable(t, "PostgreSQL", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := pgtest.CreateDatabase(ctx, srv.AdminDSN, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	open := func() *mvcc.Store {
		d, err := postgres.New(dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := mvcc.Open(ctx, d, mvcc.Options{Now: clock, Retain: mvcc.MinRetain, PruneInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	put := func(i int) int64 {
		t.Helper()
		r, err := a.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/f/k"), Value: fmt.Appendf(nil, "%d", i)}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	waitFor := func(rev int64) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; {
			if got, _, _ := b.Published(); got >= rev {
				return
			}
			if time.Now().After(deadline) {
				got, _, _ := b.Published()
				t.Fatalf("the lagging replica publishes revision %d, want %d", got, rev)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	start, _, _ := b.Published()
	release := b.HoldTailer()
	var rev int64
	for i := range 20 {
		rev = put(i)
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
	}
	if n, err := a.Prune(ctx); err != nil || n == 0 {
		release()
		t.Fatalf("prune: %d rows, %v", n, err)
	}
	floor := a.RetainFloor()
	if floor <= start+1 {
		release()
		t.Fatalf("retention floor %d leaves the lagging replica's next revision %d readable", floor, start+1)
	}
	release()
	waitFor(rev)

	all := mvcc.KeyRange{Key: []byte{}, Unbounded: true}
	_, err = b.Events(ctx, start+1, rev, all)
	var below *mvcc.BelowFloorError
	if !errors.As(err, &below) || below.Floor < floor {
		t.Fatalf("a watcher at revision %d on the lagging replica: %v, want the floor %d", start+1, err, floor)
	}
	evs, err := b.Events(ctx, floor, rev, all)
	if err != nil || len(evs) != int(rev-floor+1) {
		t.Fatalf("events from the floor %d to %d: %d, %v", floor, rev, len(evs), err)
	}
	next := put(20)
	waitFor(next)
	if evs, err := b.Events(ctx, next, next, all); err != nil || len(evs) != 1 || string(evs[0].Kv.Value) != "20" {
		t.Fatalf("the write after the floor on the lagging replica: %v, %v", evs, err)
	}
}
