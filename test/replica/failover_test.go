package replica

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// revisionBump is mvcc.RevisionBump (ADR-027), which clients see.
const revisionBump = 1_000_000_000

// TestFailoverNeverReusesRevisions: two replicas, then a failover to a
// standby that had not received the last commits (test/pgtest's
// Failover). Every watch on both replicas is cancelled with a compact
// revision past every acknowledged revision, as etcd cancels a watch below
// its compaction, so clients relist; writes through both replicas get new
// revisions past the lost ones; both replicas read what the database
// holds. (They used to hand the lost revisions out again, and their
// watchers went on from revisions that now named other writes.)
func TestFailoverNeverReusesRevisions(t *testing.T) {
	framework.Run(t, framework.OnPostgres, testFailover)
}

func testFailover(t *testing.T, b framework.Backend) {
	x := framework.Start(t, b, framework.Options{Process: true, Replicas: 2})
	clis := []*clientv3.Client{x.ReplicaClient(t, 0), x.ReplicaClient(t, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	put := func(cli *clientv3.Client, key string) int64 {
		t.Helper()
		r, err := cli.Put(ctx, key, "v")
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		return r.Header.Revision
	}
	start := put(clis[0], "/fo/kept/0")
	put(clis[1], "/fo/kept/1")
	if err := pgtest.SaveStandby(ctx, x.DSN()); err != nil {
		t.Fatal(err)
	}
	var acked int64
	for i := range 10 {
		acked = max(acked, put(clis[i%2], fmt.Sprintf("/fo/lost/%d", i)))
	}
	// A watcher on each replica, synced past the revisions to be lost.
	type cancelled struct {
		compact int64
		events  int
	}
	got := make([]chan cancelled, len(clis))
	seen := make([]atomic.Int64, len(clis))
	for i, cli := range clis {
		got[i] = make(chan cancelled, 1)
		wch := cli.Watch(ctx, "/fo/", clientv3.WithPrefix(), clientv3.WithRev(start))
		go func() {
			n := 0
			for wr := range wch {
				n += len(wr.Events)
				seen[i].Store(int64(n))
				if wr.CompactRevision != 0 || wr.Canceled {
					got[i] <- cancelled{wr.CompactRevision, n}
					return
				}
			}
			got[i] <- cancelled{0, n}
		}()
	}
	for i := range clis {
		for deadline := time.Now().Add(15 * time.Second); seen[i].Load() < 12; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d: the watcher saw %d events, want 12", i, seen[i].Load())
			}
		}
	}

	if err := pgtest.Failover(ctx, x.DSN()); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := range clis {
		select {
		case c := <-got[i]:
			if c.compact <= acked {
				t.Fatalf("replica %d: the watcher ended with compact revision %d, want one past %d", i, c.compact, acked)
			}
			if c.events != 12 {
				t.Errorf("replica %d: the watcher saw %d events before it was cancelled, want 12", i, c.events)
			}
			t.Logf("replica %d: watcher cancelled %v after the failover, compact revision %d", i, time.Since(began).Round(time.Millisecond), c.compact)
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %d: the watcher was not cancelled after the failover", i)
		}
	}

	// Writes through both go on past every revision handed out, once each.
	revs := map[int64]bool{}
	for i := range 6 {
		key := fmt.Sprintf("/fo/after/%d", i)
		for attempt := 0; ; attempt++ {
			r, err := clis[i%2].Put(ctx, key, "v")
			if err == nil {
				if revs[r.Header.Revision] || r.Header.Revision <= acked+revisionBump {
					t.Fatalf("put %s after the failover: revision %d (acknowledged up to %d before)", key, r.Header.Revision, acked)
				}
				revs[r.Header.Revision] = true
				break
			}
			if attempt > 100 {
				t.Fatalf("put %s after the failover: %v", key, err)
			}
			time.Sleep(100 * time.Millisecond) // a broken connection, as a client retries
		}
	}
	t.Logf("writes served again %v after the failover", time.Since(began).Round(time.Millisecond))

	want := []string{"/fo/after/0", "/fo/after/1", "/fo/after/2", "/fo/after/3", "/fo/after/4", "/fo/after/5", "/fo/kept/0", "/fo/kept/1"}
	for i, cli := range clis {
		r, err := cli.Get(ctx, "/fo/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for _, kv := range r.Kvs {
			keys[string(kv.Key)] = true
		}
		if k := slices.Sorted(maps.Keys(keys)); !slices.Equal(k, want) {
			t.Errorf("replica %d reads %v, want %v", i, k, want)
		}
		if _, err := cli.Get(ctx, "/fo/kept/0", clientv3.WithRev(acked)); err != rpctypes.ErrCompacted {
			t.Errorf("replica %d: a read at a lost revision: %v, want compacted", i, err)
		}
		wr := <-cli.Watch(ctx, "/fo/", clientv3.WithPrefix(), clientv3.WithRev(acked))
		if wr.CompactRevision <= acked {
			t.Errorf("replica %d: a watch from a lost revision: compact revision %d, canceled %v", i, wr.CompactRevision, wr.Canceled)
		}
	}
}
