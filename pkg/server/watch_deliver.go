package server

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// pending reports whether a watcher on the stream has not been sent
// everything up to rev.
func (st *watchStream) pending(rev int64) bool {
	for _, w := range st.watchers {
		if w.next <= rev {
			return true
		}
	}
	return false
}

// deliver sends each watcher one step of the events it has not seen, up to
// rev. It reports whether any watcher is still behind.
func (st *watchStream) deliver(ctx context.Context, rev int64) (bool, error) {
	behind := false
	for _, w := range st.sorted() {
		if w.next > rev {
			continue
		}
		to := min(rev, w.next+w.readStep()-1)
		evs, through, err := st.s.store.Events(ctx, w.next, to, w.kr)
		var below *mvcc.BelowFloorError
		if errors.As(err, &below) {
			st.remove(w.id)
			if err := st.send(st.compacted(w.id, below.Floor)); err != nil {
				return false, err
			}
			continue
		}
		if err != nil {
			return false, toGRPC(err)
		}
		// Retention raises its floor before it removes rows: if the floor is
		// now past where this watcher stands, the read may have missed some.
		if w.next < st.s.store.RetainFloor() {
			st.remove(w.id)
			if err := st.send(st.compacted(w.id, st.s.store.Floor())); err != nil {
				return false, err
			}
			continue
		}
		if err := st.sendEvents(w, evs, rev); err != nil {
			return false, err
		}
		w.step = mvcc.NextReadStep(w.readStep(), w.next, to, through, catchUpRevisions)
		w.next = through + 1
		if w.next <= rev {
			behind = true
		}
	}
	st.followed()
	return behind, nil
}

func (w *watcher) readStep() int64 {
	if w.step == 0 {
		return catchUpRevisions
	}
	return w.step
}

// compacted cancels watch id because the history it needs is below floor.
// Its header carries revision 0, as etcd's does: etcd's watcher group
// sends this answer without a revision.
func (st *watchStream) compacted(id, floor int64) *pb.WatchResponse {
	return &pb.WatchResponse{Header: st.s.header(0), WatchId: id, Canceled: true, CompactRevision: floor}
}

// sendEvents sends w the events of one step, all read at or below the
// store's revision rev, which every response's header carries, as etcd's
// do: a header never goes backwards, however far behind the watcher is.
func (st *watchStream) sendEvents(w *watcher, evs []*mvcc.Event, rev int64) error {
	out := w.toSend(evs, st.s.store.Floor())
	for len(out) > 0 {
		n := nextResponse(out, maxEventsPerResp)
		if err := st.sendFragmented(w, &pb.WatchResponse{Header: st.s.header(rev), WatchId: w.id, Events: out[:n]}); err != nil {
			return err
		}
		out = out[n:]
	}
	return nil
}

// toSend is what w is sent of evs: the events its filters let through,
// each with its prev_kv when w asked for one and the floor allows it.
func (w *watcher) toSend(evs []*mvcc.Event, floor int64) []*mvccpb.Event {
	out := make([]*mvccpb.Event, 0, len(evs))
	for _, e := range evs {
		if (e.Type == mvccpb.PUT && w.noPut) || (e.Type == mvccpb.DELETE && w.noDelete) {
			continue
		}
		me := &mvccpb.Event{Type: e.Type, Kv: e.Kv}
		// etcd reads prev_kv at send time at revision-1, which fails below
		// the compact floor: such an event goes out without it, and
		// kube-apiserver relies on noticing that.
		if w.prevKV && e.Rev()-1 >= floor {
			me.PrevKv = e.PrevKv
		}
		out = append(out, me)
	}
	return out
}

// nextResponse is how many of evs (in revision order) the next response
// carries: up to maxEvents, but never part of a revision, since clients
// treat a response as a unit of progress.
func nextResponse(evs []*mvccpb.Event, maxEvents int) int {
	n := min(len(evs), maxEvents)
	for n < len(evs) && evs[n].Kv.ModRevision == evs[n-1].Kv.ModRevision {
		n++
	}
	return n
}

// sendFragmented splits a response of the request limit or more into
// fragments when the watcher asked for that, as etcd does.
func (st *watchStream) sendFragmented(w *watcher, r *pb.WatchResponse) error {
	if !w.fragment {
		return st.send(r)
	}
	for _, f := range fragments(r, st.s.cfg.MaxRequestBytes) {
		if err := st.send(f); err != nil {
			return err
		}
	}
	return nil
}

// fragments splits r as etcd's sendFragments does: r alone when it is
// under limit bytes or has one event, else fragments each under limit
// bytes as sent (or of one event), all but the last flagged Fragment.
func fragments(r *pb.WatchResponse, limit int) []*pb.WatchResponse {
	if len(r.Events) < 2 || proto.Size(r) < limit {
		return []*pb.WatchResponse{r}
	}
	var out []*pb.WatchResponse
	evs := r.Events
	for len(evs) > 0 {
		f := &pb.WatchResponse{Header: r.Header, WatchId: r.WatchId, Fragment: true}
		// The size of f as it grows: each event adds its field's tag and
		// length prefix to its own size.
		size := proto.Size(f)
		n := 0
		for ; n < len(evs); n++ {
			es := proto.Size(evs[n])
			grown := size + 1 + protowire.SizeVarint(uint64(es)) + es
			if n > 0 && grown >= limit {
				break
			}
			size = grown
		}
		f.Events, f.Fragment = evs[:n], n < len(evs)
		out = append(out, f)
		evs = evs[n:]
	}
	return out
}
