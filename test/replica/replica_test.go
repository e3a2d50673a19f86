package replica

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// ack is one acknowledged write.
type ack struct {
	key  string
	rev  int64
	kind mvccpb.Event_EventType
}

// evKey identifies an event for comparison across watchers.
func evKey(e *clientv3.Event) string {
	return fmt.Sprintf("%d %s %q %q v%d c%d", e.Kv.ModRevision, e.Type, e.Kv.Key, e.Kv.Value, e.Kv.Version, e.Kv.CreateRevision)
}

// watchAll collects events under prefix from rev until stop, in arrival order.
type collector struct {
	mu  sync.Mutex
	evs []*clientv3.Event
	err error
	max atomic.Int64
}

func collect(ctx context.Context, cli *clientv3.Client, prefix string, from int64) *collector {
	c := &collector{}
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())
	go func() {
		for wr := range wch {
			c.mu.Lock()
			if err := wr.Err(); err != nil && c.err == nil {
				c.err = err
			}
			c.evs = append(c.evs, wr.Events...)
			c.mu.Unlock()
			if n := len(wr.Events); n > 0 {
				c.max.Store(wr.Events[n-1].Kv.ModRevision)
			}
		}
	}()
	return c
}

func (c *collector) waitFor(t *testing.T, name string, rev int64, d time.Duration) []*clientv3.Event {
	t.Helper()
	deadline := time.Now().Add(d)
	for c.max.Load() < rev {
		if time.Now().After(deadline) {
			t.Fatalf("watcher %s: saw up to revision %d, want %d", name, c.max.Load(), rev)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // anything extra (a duplicate) arrives too
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		t.Fatalf("watcher %s: %v", name, c.err)
	}
	return append([]*clientv3.Event(nil), c.evs...)
}

// checkStream verifies one watcher's events: revisions never go down, no
// event twice, and every acknowledged write exactly once at its revision.
func checkStream(t *testing.T, name string, evs []*clientv3.Event, acks []ack) {
	t.Helper()
	seen := map[string]int{}
	var last int64
	for _, e := range evs {
		if e.Kv.ModRevision < last {
			t.Fatalf("%s: revision %d after %d", name, e.Kv.ModRevision, last)
		}
		last = e.Kv.ModRevision
		k := fmt.Sprintf("%d/%s", e.Kv.ModRevision, e.Kv.Key)
		seen[k]++
		if seen[k] > 1 {
			t.Fatalf("%s: event %s delivered twice", name, evKey(e))
		}
		if e.Type == mvccpb.PUT && e.Kv.Version > 1 && e.PrevKv == nil {
			t.Fatalf("%s: update without prev_kv: %s", name, evKey(e))
		}
		if e.Type == mvccpb.DELETE && e.PrevKv == nil {
			t.Fatalf("%s: delete without prev_kv: %s", name, evKey(e))
		}
	}
	byKey := map[string]*clientv3.Event{}
	for _, e := range evs {
		byKey[fmt.Sprintf("%d/%s", e.Kv.ModRevision, e.Kv.Key)] = e
	}
	for _, a := range acks {
		e, ok := byKey[fmt.Sprintf("%d/%s", a.rev, a.key)]
		if !ok {
			t.Fatalf("%s: acknowledged %s of %s at revision %d never delivered", name, a.kind, a.key, a.rev)
		}
		if e.Type != a.kind {
			t.Fatalf("%s: acknowledged %s of %s at %d delivered as %s", name, a.kind, a.key, a.rev, e.Type)
		}
	}
}

// TestReplicas: two quantykube processes on one database (PostgreSQL,
// directly and through PgBouncer, or MariaDB), writers through
// both, a watcher on each: both watchers see exactly the same events in
// revision order with no hole, and each acknowledged write exactly once.
func TestReplicas(t *testing.T) {
	framework.Run(t, framework.Replicated, testReplicas)
}

func testReplicas(t *testing.T, b framework.Backend) {
	x := framework.Start(t, b, framework.Options{Process: true, Replicas: 2})
	ca, cb := x.ReplicaClient(t, 0), x.ReplicaClient(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	start, err := ca.Get(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	from := start.Header.Revision + 1
	wa := collect(ctx, ca, "/r/", from)
	wb := collect(ctx, cb, "/r/", from)

	const writers = 32 // per replica
	const perWriter = 60
	var mu sync.Mutex
	var acks []ack
	var wg sync.WaitGroup
	for _, side := range []struct {
		name string
		cli  *clientv3.Client
	}{{"a", ca}, {"b", cb}} {
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWriter; i++ {
					key := fmt.Sprintf("/r/%s/%02d/%03d", side.name, w, i)
					// create, as kube-apiserver does
					tr, err := side.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
						Then(clientv3.OpPut(key, "v1")).Commit()
					if err != nil {
						t.Errorf("create %s: %v", key, err)
						return
					}
					if !tr.Succeeded {
						t.Errorf("create %s: compare failed", key)
						return
					}
					mu.Lock()
					acks = append(acks, ack{key, tr.Header.Revision, mvccpb.PUT})
					mu.Unlock()
					created := tr.Header.Revision
					switch i % 3 {
					case 1: // update through the other replica
						other := cb
						if side.name == "b" {
							other = ca
						}
						ur, err := other.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", created)).
							Then(clientv3.OpPut(key, "v2")).Commit()
						if err != nil || !ur.Succeeded {
							t.Errorf("update %s at %d through the other replica: %v succeeded=%v", key, created, err, ur != nil && ur.Succeeded)
							return
						}
						mu.Lock()
						acks = append(acks, ack{key, ur.Header.Revision, mvccpb.PUT})
						mu.Unlock()
					case 2:
						dr, err := side.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", created)).
							Then(clientv3.OpDelete(key)).Commit()
						if err != nil || !dr.Succeeded {
							t.Errorf("delete %s: %v", key, err)
							return
						}
						mu.Lock()
						acks = append(acks, ack{key, dr.Header.Revision, mvccpb.DELETE})
						mu.Unlock()
					}
				}
			}()
		}
	}
	began := time.Now()
	wg.Wait()
	elapsed := time.Since(began)
	if t.Failed() {
		return
	}
	var maxRev int64
	revs := map[int64]bool{}
	for _, x := range acks {
		maxRev = max(maxRev, x.rev)
		if revs[x.rev] {
			t.Fatalf("two acknowledged writes share revision %d", x.rev)
		}
		revs[x.rev] = true
	}
	t.Logf("%d acknowledged writes through 2 replicas (%d clients) in %v: %.0f writes/s", len(acks), 2*writers, elapsed.Round(time.Millisecond), float64(len(acks))/elapsed.Seconds())
	// No holes: every revision in [from, maxRev] is one of our writes.
	if int64(len(acks)) != maxRev-from+1 {
		t.Fatalf("%d acknowledged writes span revisions %d..%d", len(acks), from, maxRev)
	}
	evA := wa.waitFor(t, "a", maxRev, 30*time.Second)
	evB := wb.waitFor(t, "b", maxRev, 30*time.Second)
	checkStream(t, "watcher on a", evA, acks)
	checkStream(t, "watcher on b", evB, acks)
	if len(evA) != len(evB) || len(evA) != len(acks) {
		t.Fatalf("watcher a saw %d events, b %d, acknowledged %d", len(evA), len(evB), len(acks))
	}
	for i := range evA {
		if evKey(evA[i]) != evKey(evB[i]) {
			t.Fatalf("event %d differs: a %s, b %s", i, evKey(evA[i]), evKey(evB[i]))
		}
	}

	// Both replicas answer reads with the same state and the same count.
	for _, cli := range []*clientv3.Client{ca, cb} {
		r, err := cli.Get(ctx, "/r/", clientv3.WithPrefix(), clientv3.WithRev(maxRev))
		if err != nil {
			t.Fatal(err)
		}
		live := map[string]bool{}
		for _, x := range acks {
			live[x.key] = x.kind == mvccpb.PUT
		}
		n := 0
		for _, v := range live {
			if v {
				n++
			}
		}
		if int(r.Count) != n {
			t.Fatalf("count at %d: %d, want %d", maxRev, r.Count, n)
		}
	}
}

// TestReplicaLeasesAndCompact: a lease granted on one replica and kept
// alive through the other survives; once abandoned it expires exactly once
// (one revision, one DELETE per key on every watcher); Compact through one
// replica is the floor on both.
func TestReplicaLeasesAndCompact(t *testing.T) {
	framework.Run(t, framework.Replicated, testReplicaLeasesAndCompact)
}

func testReplicaLeasesAndCompact(t *testing.T, b framework.Backend) {
	x := framework.Start(t, b, framework.Options{Process: true, Replicas: 2})
	ca, cb := x.ReplicaClient(t, 0), x.ReplicaClient(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start, err := ca.Get(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	wa := collect(ctx, ca, "/l/", start.Header.Revision+1)
	wb := collect(ctx, cb, "/l/", start.Header.Revision+1)

	lease, err := ca.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := cb.Put(ctx, "/l/1", "x", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ca.Put(ctx, "/l/2", "y", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	// Keep it alive through b for longer than its TTL: a must not expire it.
	for i := 0; i < 6; i++ {
		if _, err := cb.KeepAliveOnce(ctx, lease.ID); err != nil {
			t.Fatalf("keepalive through b: %v", err)
		}
		time.Sleep(time.Second)
	}
	r, err := ca.Get(ctx, "/l/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != 2 {
		t.Fatalf("a lease kept alive through b expired (keys left: %d)", r.Count)
	}
	ttl, err := ca.TimeToLive(ctx, lease.ID)
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("TimeToLive through a: %v ttl=%v", err, ttl)
	}
	// Abandon it: it expires once, in one revision.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := cb.Get(ctx, "/l/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease did not expire")
		}
		time.Sleep(100 * time.Millisecond)
	}
	after, err := ca.Put(ctx, "/l/after", "z")
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]*collector{"a": wa, "b": wb} {
		evs := w.waitFor(t, name, after.Header.Revision, 20*time.Second)
		var dels []*clientv3.Event
		for _, e := range evs {
			if e.Type == mvccpb.DELETE {
				dels = append(dels, e)
			}
		}
		if len(dels) != 2 || dels[0].Kv.ModRevision != dels[1].Kv.ModRevision {
			var s []string
			for _, e := range evs {
				s = append(s, evKey(e))
			}
			t.Fatalf("watcher %s: want the 2 keys deleted in one revision, once: %v", name, s)
		}
		if after.Header.Revision != dels[0].Kv.ModRevision+1 {
			t.Fatalf("expiry took revisions %d..%d", dels[0].Kv.ModRevision, after.Header.Revision-1)
		}
	}
	if _, err := cb.TimeToLive(ctx, lease.ID); err == nil {
		if l, _ := cb.TimeToLive(ctx, lease.ID); l != nil && l.TTL > 0 {
			t.Fatalf("expired lease still alive on b: %+v", l)
		}
	}

	// Compact through b: a refuses the old revision too, and its watch
	// below the floor is canceled with the floor.
	if _, err := cb.Compact(ctx, p1.Header.Revision+1); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		_, err = ca.Get(ctx, "/l/1", clientv3.WithRev(p1.Header.Revision))
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a still reads below the floor b set")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(err.Error(), "required revision has been compacted") {
		t.Fatalf("read below the floor through a: %v", err)
	}
	// A read checks the floor in the database; a new watch checks the one
	// a's tailer follows, which b's notification raises a moment later.
	deadline = time.Now().Add(10 * time.Second)
	for {
		wctx, wcancel := context.WithCancel(ctx)
		var wr clientv3.WatchResponse
		select {
		case wr = <-ca.Watch(wctx, "/l/", clientv3.WithPrefix(), clientv3.WithRev(p1.Header.Revision)):
		case <-time.After(10 * time.Second):
			t.Fatal("watch below the floor on a: no answer")
		}
		wcancel()
		if wr.CompactRevision == p1.Header.Revision+1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch below the floor on a: %+v", wr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
