package history

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/proto/historypb"

	"github.com/quantyroot/quantykube/test/framework"
)

// watchFrom opens an etcd watch and waits until it is created.
func (e *env) watchFrom(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	e.t.Helper()
	wch := e.etcd.Watch(ctx, key, append(opts, clientv3.WithCreatedNotify())...)
	select {
	case wr, ok := <-wch:
		if !ok || !wr.Created || wr.Err() != nil {
			e.t.Fatalf("watch %q: not created: %v %v", key, ok, wr.Err())
		}
	case <-time.After(10 * time.Second):
		e.t.Fatalf("watch %q: no created response", key)
	}
	return wch
}

// nextEvent waits for one event on wch.
func nextEvent(t *testing.T, wch clientv3.WatchChan) *clientv3.Event {
	t.Helper()
	select {
	case wr, ok := <-wch:
		if !ok {
			t.Fatal("watch closed")
		}
		if err := wr.Err(); err != nil {
			t.Fatalf("watch: %v", err)
		}
		if len(wr.Events) != 1 {
			t.Fatalf("watch response with %d events, want 1", len(wr.Events))
		}
		return wr.Events[0]
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return nil
}

func noEvent(t *testing.T, wch clientv3.WatchChan, d time.Duration) {
	t.Helper()
	select {
	case wr := <-wch:
		if len(wr.Events) > 0 {
			t.Fatalf("unexpected event %v %s", wr.Events[0].Type, kvString(wr.Events[0].Kv))
		}
	case <-time.After(d):
	}
}

// TestRestoreDeletedKeySeenByWatcher: a deleted key restored from an old
// revision comes back as an ordinary PUT with a new revision, its old value
// and no lease, and an etcd watcher opened before sees exactly that event,
// as does a second watcher on its prefix.
func TestRestoreDeletedKeySeenByWatcher(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e := startEnv(t, b, nil, nil)
		ctx := testCtx(t)
		lease, err := e.etcd.Grant(ctx, 3600)
		must(t, err)
		e.put("/r/cm", "v1")
		rev2 := e.put("/r/cm", "v2", clientv3.WithLease(lease.ID))
		delRev, ok := e.del("/r/cm")
		if !ok {
			t.Fatal("delete deleted nothing")
		}
		e.put("/r/other", "x")

		wch := e.watchFrom(ctx, "/r/cm", clientv3.WithPrevKV())
		pch := e.watchFrom(ctx, "/r/", clientv3.WithPrefix())
		resp, err := e.hist.Restore(ctx, &historypb.Request{Key: []byte("/r/cm"), Revision: rev2})
		must(t, err)
		if resp.Revision != rev2 {
			t.Fatalf("restore read revision %d, want %d", resp.Revision, rev2)
		}
		if resp.NewRevision <= delRev+1 {
			t.Fatalf("new revision %d, want one after the store's %d", resp.NewRevision, delRev+1)
		}
		want := &mvccpb.KeyValue{Key: []byte("/r/cm"), Value: []byte("v2"), CreateRevision: resp.NewRevision, ModRevision: resp.NewRevision, Version: 1}
		if kvString(resp.Kv) != kvString(want) {
			t.Fatalf("restore wrote %s, want %s", kvString(resp.Kv), kvString(want))
		}
		for _, ch := range []clientv3.WatchChan{wch, pch} {
			ev := nextEvent(t, ch)
			if ev.Type != mvccpb.PUT || kvString(ev.Kv) != kvString(want) || ev.PrevKv != nil {
				t.Fatalf("watch saw %v %s prev %s, want PUT %s without prev", ev.Type, kvString(ev.Kv), kvString(ev.PrevKv), kvString(want))
			}
		}
		got, err := e.etcd.Get(ctx, "/r/cm")
		must(t, err)
		if len(got.Kvs) != 1 || kvString(got.Kvs[0]) != kvString(want) || got.Header.Revision != resp.NewRevision {
			t.Fatalf("etcd Get after restore: %v", got.Kvs)
		}

		// Restoring to a time before the key existed deletes it: a DELETE event.
		resp, err = e.hist.Restore(ctx, &historypb.Request{Key: []byte("/r/cm"), Revision: 1})
		must(t, err)
		if resp.Kv != nil || resp.NewRevision == 0 || resp.Revision != 1 {
			t.Fatalf("restore to absence = %v", resp)
		}
		ev := nextEvent(t, wch)
		if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision != resp.NewRevision || ev.PrevKv == nil || string(ev.PrevKv.Value) != "v2" {
			t.Fatalf("watch saw %v %s prev %s, want DELETE at %d with prev v2", ev.Type, kvString(ev.Kv), kvString(ev.PrevKv), resp.NewRevision)
		}
		if ev := nextEvent(t, pch); ev.Type != mvccpb.DELETE {
			t.Fatalf("prefix watch saw %v, want DELETE", ev.Type)
		}
		// The lease kept nothing alive: revoking it writes nothing.
		_, err = e.etcd.Revoke(ctx, lease.ID)
		must(t, err)
		noEvent(t, wch, 200*time.Millisecond)
	})
}

// TestRestoreToCurrentStateIsNoop: restoring a key to the state it already
// has writes nothing and answers new_revision 0; so does restoring an
// absent key to a revision where it was absent.
func TestRestoreToCurrentStateIsNoop(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e := startEnv(t, b, nil, nil)
		ctx := testCtx(t)
		r1 := e.put("/n/k", "same")
		e.put("/n/k", "other")
		r3 := e.put("/n/k", "same") // the value of r1 again
		wch := e.watchFrom(ctx, "/n/", clientv3.WithPrefix())
		cur := e.rev()
		for _, r := range []int64{r3, r1} {
			resp, err := e.hist.Restore(ctx, &historypb.Request{Key: []byte("/n/k"), Revision: r})
			must(t, err)
			if resp.NewRevision != 0 || resp.Revision != r || resp.Kv == nil || string(resp.Kv.Value) != "same" {
				t.Fatalf("restore to rev %d (same value): %v, want new_revision 0", r, resp)
			}
		}
		// An absent key restored to a revision where it was absent.
		resp, err := e.hist.Restore(ctx, &historypb.Request{Key: []byte("/n/absent"), Revision: r1})
		must(t, err)
		if resp.NewRevision != 0 || resp.Kv != nil {
			t.Fatalf("restore of an absent key to absence: %v", resp)
		}
		if got := e.rev(); got != cur {
			t.Fatalf("revision moved from %d to %d on no-op restores", cur, got)
		}
		noEvent(t, wch, 300*time.Millisecond)

		// Restore by time, and the argument checks.
		resp, err = e.hist.Restore(ctx, &historypb.Request{Key: []byte("/n/k"), UnixMs: time.Now().UnixMilli()})
		must(t, err)
		if resp.NewRevision != 0 || resp.Revision != cur {
			t.Fatalf("restore to now: %v, want a no-op at revision %d", resp, cur)
		}
		_, err = e.hist.Restore(ctx, &historypb.Request{Key: []byte("/n/k"), Revision: r1, UnixMs: time.Now().UnixMilli()})
		wantCode(t, err, codes.InvalidArgument, "Restore with revision and unix_ms")
	})
}
