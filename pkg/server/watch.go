package server

import (
	"context"
	"math"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

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
	// when 0, or less after a read that stopped short at the store's bound
	// on a read of the log (mvcc.NextReadStep).
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
	// follow tells the store the oldest revision a watcher here has not
	// been sent, so that the ring keeps what the stream has yet to send.
	follow mvcc.Follower
	// progressPending is a WatchProgressRequest waiting for every watcher
	// to be synced.
	progressPending bool
}

func (ws *watchServer) Watch(stream pb.Watch_WatchServer) error {
	st := &watchStream{s: ws.s, stream: stream, ctrl: make(chan *pb.WatchRequest, 128), watchers: map[int64]*watcher{}, follow: ws.s.store.Follow()}
	defer st.follow.Close()
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
		st.followed()
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
	st.followed()
	return nil
}

// followed tells the store where the stream's watchers stand.
func (st *watchStream) followed() {
	next := int64(math.MaxInt64)
	for _, w := range st.watchers {
		next = min(next, w.next)
	}
	st.follow.At(next)
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
