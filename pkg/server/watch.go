package server

import (
	"context"
	"errors"
	"runtime"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

// Bounds on one catch-up step, so a watcher far behind is served in
// pieces with bounded memory and never holds up the stream's control
// messages for long.
const (
	catchUpRevisions = 2000
	maxEventsPerResp = 1000
)

// watcher is one watch on a stream. next is the first revision it has not
// been sent; it is synced when next is past the hub's revision.
type watcher struct {
	id   int64
	kr   mvcc.KeyRange
	next int64
	// step is how many revisions the next read asks for: catchUpRevisions
	// (when 0), or twice what the last read returned when it stopped short
	// of what it asked (mvcc's bound on a read of the log, reached with
	// large values). PostgreSQL sends every row asked for, and the store
	// discards those past its bound, so asking for far more wastes a
	// transfer per read.
	step     int64
	prevKV   bool
	progress bool
	fragment bool
	noPut    bool
	noDelete bool
}

// watchStream serves one Watch RPC. A single goroutine sends everything,
// so created, event, progress and cancel responses go out in the order
// that gives etcd's guarantees: a progress response at R follows every
// event <= R of every watcher on the stream.
type watchStream struct {
	s        *Server
	stream   pb.Watch_WatchServer
	ctrl     chan *pb.WatchRequest
	watchers map[int64]*watcher
	nextID   int64
	// progressPending is a WatchProgressRequest waiting for every watcher
	// to be synced.
	progressPending bool
}

func (ws *watchServer) Watch(stream pb.Watch_WatchServer) error {
	st := &watchStream{s: ws.s, stream: stream, ctrl: make(chan *pb.WatchRequest, 128), watchers: map[int64]*watcher{}}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case st.ctrl <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() { metrics.Watchers.Sub(float64(len(st.watchers))) }()
	return st.run(ctx, recvErr)
}

func (st *watchStream) run(ctx context.Context, recvErr <-chan error) error {
	tick := time.NewTicker(st.s.cfg.ProgressNotifyInterval)
	defer tick.Stop()
	for {
		rev, wake, closed := st.s.store.Published()
		if closed {
			return rpctypes.ErrGRPCStopped
		}
		behind, err := st.deliverInTurn(ctx, rev)
		if err != nil {
			return err
		}
		if !behind && st.progressPending {
			st.progressPending = false
			if len(st.watchers) > 0 {
				// etcd answers a stream-wide progress request with watch ID -1,
				// which clients broadcast to every watcher on the stream.
				if err := st.send(&pb.WatchResponse{Header: st.s.header(rev), WatchId: -1}); err != nil {
					return err
				}
			}
		}
		if behind {
			// Keep catching up, but let control messages in between steps.
			select {
			case req := <-st.ctrl:
				if err := st.handle(req, rev); err != nil {
					return err
				}
			default:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.s.cfg.Done:
			return rpctypes.ErrGRPCStopped
		case err := <-recvErr:
			return err
		case req := <-st.ctrl:
			if err := st.handle(req, rev); err != nil {
				return err
			}
		case <-wake:
		case <-tick.C:
			for _, w := range st.sorted() {
				if w.progress && w.next > rev {
					if err := st.send(&pb.WatchResponse{Header: st.s.header(rev), WatchId: w.id}); err != nil {
						return err
					}
				}
			}
		}
	}
}

func (st *watchStream) remove(id int64) {
	if _, ok := st.watchers[id]; ok {
		delete(st.watchers, id)
		metrics.Watchers.Dec()
	}
}

func (st *watchStream) sorted() []*watcher {
	ws := make([]*watcher, 0, len(st.watchers))
	for _, w := range st.watchers {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].id < ws[j].id })
	return ws
}

func (st *watchStream) send(r *pb.WatchResponse) error {
	return st.stream.Send(r)
}

func (st *watchStream) handle(req *pb.WatchRequest, rev int64) error {
	switch v := req.RequestUnion.(type) {
	case *pb.WatchRequest_CreateRequest:
		return st.create(v.CreateRequest, rev)
	case *pb.WatchRequest_CancelRequest:
		id := v.CancelRequest.WatchId
		if _, ok := st.watchers[id]; !ok {
			return nil
		}
		st.remove(id)
		return st.send(&pb.WatchResponse{Header: st.s.header(rev), WatchId: id, Canceled: true})
	case *pb.WatchRequest_ProgressRequest:
		st.progressPending = true
	}
	return nil
}

func (st *watchStream) create(cr *pb.WatchCreateRequest, rev int64) error {
	if cr == nil {
		return nil
	}
	w, refused := st.newWatcher(cr, rev)
	if refused != "" {
		// etcd answers a create it refuses with clientv3.InvalidWatchID, so
		// the answer names no watch of the stream: a live watch whose ID
		// was asked for again keeps running.
		return st.send(&pb.WatchResponse{Header: st.s.header(rev), WatchId: -1, Created: true, Canceled: true, CancelReason: refused})
	}
	if err := st.send(&pb.WatchResponse{Header: st.s.header(rev), WatchId: w.id, Created: true}); err != nil {
		return err
	}
	if floor := st.s.store.Floor(); cr.StartRevision > 0 && cr.StartRevision < floor {
		// The history it asks for is below the floor the etcd API shows.
		return st.send(st.compacted(w.id, floor))
	}
	st.watchers[w.id] = w
	metrics.Watchers.Inc()
	return nil
}

// newWatcher makes the watcher cr asks for, or returns why etcd refuses it,
// checked in etcd's order (recvLoop, then watchStream.Watch): a negative
// start revision, an empty range, an explicit ID already in use. Only a
// watcher that is made takes an ID from the stream's counter.
func (st *watchStream) newWatcher(cr *pb.WatchCreateRequest, rev int64) (*watcher, string) {
	if cr.StartRevision < 0 {
		return nil, rpctypes.ErrCompacted.Error()
	}
	key := cr.Key
	if len(key) == 0 {
		key = []byte{0} // the smallest key, as etcd reads an empty one
	}
	w := &watcher{
		kr:       mvcc.NewKeyRange(key, cr.RangeEnd),
		next:     cr.StartRevision,
		prevKV:   cr.PrevKv,
		progress: cr.ProgressNotify,
		fragment: cr.Fragment,
	}
	if w.kr.Empty() {
		return nil, "mvcc: watcher range is empty"
	}
	if cr.WatchId != 0 && st.watchers[cr.WatchId] != nil {
		return nil, "mvcc: duplicate watch ID provided on the WatchStream"
	}
	for _, f := range cr.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}
	if w.next == 0 {
		w.next = rev + 1
	}
	w.id = cr.WatchId
	if w.id == 0 { // clientv3.AutoWatchID
		for st.watchers[st.nextID] != nil {
			st.nextID++
		}
		w.id = st.nextID
		st.nextID++
	}
	return w, ""
}

// turns bounds how many watch streams deliver at once, so that fan-out
// leaves a P to the requests. Delivering to many watchers is CPU work that
// rarely blocks, and the Go runtime looks for network input only when a P
// runs out of work (or from its monitor, every 10 ms): with every P busy
// delivering, a write waits that long at each step between its request and
// its answer, and the next write is sent only after the deliveries of the
// last one, at the fan-out's pace. With a P left free, writes are answered
// while their events wait, and a stream that fell behind sends each of its
// watchers the revisions it missed in one response (deliver), which costs
// less per event than a response per revision.
type turns struct {
	slots chan struct{}
	// wait bounds the wait for a turn: a stream whose client stops reading
	// blocks in Send holding its turn, and must slow the other streams'
	// deliveries, not stop them.
	wait time.Duration

	mu   sync.Mutex
	held map[*watchStream]time.Time // since when each holder has held its turn
}

// turnWait is how long a stream waits for a turn before it delivers anyway.
const turnWait = 100 * time.Millisecond

// newTurns lets GOMAXPROCS-1 streams deliver at once (one on a single P).
func newTurns(wait time.Duration) *turns {
	return &turns{slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)), wait: wait, held: map[*watchStream]time.Time{}}
}

// take waits for a turn for st until the longest holder has held its turn
// for t.wait, or until ctx ends, and reports whether it got one, which the
// caller gives back with give. Waiting is measured from the hold, not from
// the call, so that a stream stalled in Send delays each of the others
// once, not at every delivery while it stays stalled.
func (t *turns) take(ctx context.Context, st *watchStream) bool {
	select {
	case t.slots <- struct{}{}:
		t.hold(st)
		return true
	default:
	}
	wait := t.wait - t.longestHold()
	if wait <= 0 {
		return false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case t.slots <- struct{}{}:
		t.hold(st)
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

func (t *turns) hold(st *watchStream) {
	t.mu.Lock()
	t.held[st] = time.Now()
	t.mu.Unlock()
}

// longestHold is how long the earliest of the current holders has held its
// turn (0 when none is recorded yet).
func (t *turns) longestHold() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var longest time.Duration
	for _, since := range t.held {
		longest = max(longest, time.Since(since))
	}
	return longest
}

func (t *turns) give(st *watchStream) {
	t.mu.Lock()
	delete(t.held, st)
	t.mu.Unlock()
	<-t.slots
}

// deliverInTurn is deliver in one of the server's delivery turns, taken
// only when some watcher has events to be sent.
func (st *watchStream) deliverInTurn(ctx context.Context, rev int64) (bool, error) {
	if !st.pending(rev) {
		return false, nil
	}
	if st.s.turns.take(ctx, st) {
		defer st.s.turns.give(st)
	}
	return st.deliver(ctx, rev)
}

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
		w.step = nextStep(w.readStep(), w.next, to, through)
		w.next = through + 1
		if w.next <= rev {
			behind = true
		}
	}
	return behind, nil
}

func (w *watcher) readStep() int64 {
	if w.step == 0 {
		return catchUpRevisions
	}
	return w.step
}

// nextStep is the revisions the read after one that asked for [from, to]
// with step and got [from, through] asks for: twice what it got when it
// stopped short, else step doubled up to catchUpRevisions.
func nextStep(step, from, to, through int64) int64 {
	if through < to {
		return 2 * (through - from + 1)
	}
	return min(2*step, catchUpRevisions)
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
