package server

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// fakeBackend answers what the watch engine asks of a store; any other
// method panics on the nil embedded Backend.
type fakeBackend struct {
	mvcc.Backend
	member             uint64 // 0: 0xe1
	floor, retainFloor int64
	events             func(from, to int64) ([]*mvcc.Event, error)
	// readRevs > 0 makes each Events call stop after that many revisions,
	// as a bounded read of the log does.
	readRevs int64
	asked    [][2]int64 // each Events call's from and to
	follower fakeFollower
}

// fakeFollower records where the stream said it stands.
type fakeFollower struct {
	at     []int64
	closed bool
}

func (f *fakeFollower) At(rev int64) { f.at = append(f.at, rev) }
func (f *fakeFollower) Close()       { f.closed = true }

func (f *fakeBackend) ClusterID() uint64 { return 0xc1 }
func (f *fakeBackend) MemberID() uint64 {
	if f.member == 0 {
		return 0xe1
	}
	return f.member
}
func (f *fakeBackend) Floor() int64          { return f.floor }
func (f *fakeBackend) RetainFloor() int64    { return f.retainFloor }
func (f *fakeBackend) Follow() mvcc.Follower { return &f.follower }
func (f *fakeBackend) Published() (int64, <-chan struct{}, bool) {
	return 1, make(chan struct{}), false
}
func (f *fakeBackend) Events(_ context.Context, from, to int64, _ mvcc.KeyRange) ([]*mvcc.Event, int64, error) {
	f.asked = append(f.asked, [2]int64{from, to})
	if f.readRevs > 0 {
		to = min(to, from+f.readRevs-1)
	}
	evs, err := f.events(from, to)
	return evs, to, err
}

// captureStream records what a watch stream sends.
type captureStream struct {
	pb.Watch_WatchServer
	sent []*pb.WatchResponse
}

func (c *captureStream) Send(r *pb.WatchResponse) error {
	c.sent = append(c.sent, r)
	return nil
}

func newTestStream(b *fakeBackend, maxRequestBytes int) (*watchStream, *captureStream) {
	cs := &captureStream{}
	s := New(Config{Backend: b, MaxRequestBytes: maxRequestBytes})
	return &watchStream{s: s, stream: cs, watchers: map[int64]*watcher{}, follow: b.Follow()}, cs
}

func kv(key string, rev int64, value string) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev, CreateRevision: rev, Version: 1, Value: []byte(value)}
}

func putEv(key string, rev int64, prev *mvccpb.KeyValue) *mvcc.Event {
	return &mvcc.Event{Type: mvccpb.PUT, Kv: kv(key, rev, "v"), PrevKv: prev}
}

func delEv(key string, rev int64, prev *mvccpb.KeyValue) *mvcc.Event {
	return &mvcc.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}, PrevKv: prev}
}

// describe lists events as TYPE key@rev, with "+prev" when one is sent.
func describe(evs []*mvccpb.Event) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = fmt.Sprintf("%v %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision)
		if e.PrevKv != nil {
			parts[i] += "+prev"
		}
	}
	return strings.Join(parts, ", ")
}

func TestWatcherToSend(t *testing.T) {
	evs := func() []*mvcc.Event {
		return []*mvcc.Event{
			putEv("a", 5, nil), // a create has no prev_kv
			putEv("a", 6, kv("a", 5, "v")),
			delEv("a", 7, kv("a", 6, "v")),
			putEv("b", 8, kv("b", 3, "v")),
		}
	}
	for _, tc := range []struct {
		name  string
		w     watcher
		floor int64
		want  string
	}{
		{name: "everything, no prev_kv", w: watcher{}, want: "PUT a@5, PUT a@6, DELETE a@7, PUT b@8"},
		{name: "prev_kv when asked", w: watcher{prevKV: true}, want: "PUT a@5, PUT a@6+prev, DELETE a@7+prev, PUT b@8+prev"},
		{name: "NOPUT", w: watcher{noPut: true, prevKV: true}, want: "DELETE a@7+prev"},
		{name: "NODELETE", w: watcher{noDelete: true}, want: "PUT a@5, PUT a@6, PUT b@8"},
		{name: "NOPUT and NODELETE", w: watcher{noPut: true, noDelete: true}, want: ""},
		// prev_kv is read at revision-1, which must not be below the floor.
		{name: "prev_kv at the floor", w: watcher{prevKV: true}, floor: 6, want: "PUT a@5, PUT a@6, DELETE a@7+prev, PUT b@8+prev"},
		{name: "prev_kv above the floor", w: watcher{prevKV: true}, floor: 7, want: "PUT a@5, PUT a@6, DELETE a@7, PUT b@8+prev"},
		{name: "no prev_kv above any event", w: watcher{prevKV: true}, floor: 9, want: "PUT a@5, PUT a@6, DELETE a@7, PUT b@8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := evs()
			got := tc.w.toSend(in, tc.floor)
			if d := describe(got); d != tc.want {
				t.Fatalf("sent %q, want %q", d, tc.want)
			}
			for _, e := range got {
				if e.PrevKv != nil && e.PrevKv.ModRevision >= e.Kv.ModRevision {
					t.Fatalf("%s@%d carries prev_kv at %d", e.Kv.Key, e.Kv.ModRevision, e.PrevKv.ModRevision)
				}
			}
			// The store's events are shared with other watchers: untouched.
			if in[1].PrevKv == nil || in[2].PrevKv == nil {
				t.Fatal("toSend changed the store's events")
			}
		})
	}
}

func TestNextResponse(t *testing.T) {
	for _, tc := range []struct {
		name string
		revs []int64
		max  int
		want []int // events per response
	}{
		{name: "all in one", revs: []int64{3, 4, 5}, max: 1000, want: []int{3}},
		{name: "split at the limit", revs: []int64{3, 4, 5}, max: 2, want: []int{2, 1}},
		{name: "one per response", revs: []int64{2, 3}, max: 1, want: []int{1, 1}},
		{name: "a revision is never split", revs: []int64{2, 2, 3, 3, 3, 4}, max: 2, want: []int{2, 3, 1}},
		{name: "one revision over the limit goes whole", revs: []int64{2, 2, 2, 2}, max: 1, want: []int{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := make([]*mvccpb.Event, len(tc.revs))
			for i, r := range tc.revs {
				evs[i] = &mvccpb.Event{Kv: kv(fmt.Sprint(i), r, "")}
			}
			var got []int
			for rest := evs; len(rest) > 0; {
				n := nextResponse(rest, tc.max)
				if n < 1 || n > len(rest) {
					t.Fatalf("nextResponse took %d of %d events", n, len(rest))
				}
				got = append(got, n)
				rest = rest[n:]
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("responses of %v events, want %v", got, tc.want)
			}
		})
	}
}

// sizedEvents returns events whose encoded sizes are those given.
func sizedEvents(t *testing.T, sizes ...int) []*mvccpb.Event {
	t.Helper()
	out := make([]*mvccpb.Event, len(sizes))
	for i, size := range sizes {
		e := &mvccpb.Event{Kv: kv(fmt.Sprintf("k%d", i), int64(i+2), "")}
		for proto.Size(e) < size {
			e.Kv.Value = append(e.Kv.Value, 'v')
		}
		if got := proto.Size(e); got != size {
			t.Fatalf("event %d: no value gives size %d (%d)", i, size, got)
		}
		out[i] = e
	}
	return out
}

// TestFragments follows etcd v3.6.16's sendFragments
// (server/etcdserver/api/v3rpc/watch.go): a response of maxRequestBytes or
// more with two events or more goes in fragments, each filled with events
// while it stays under the limit as encoded.
func TestFragments(t *testing.T) {
	hdr := &pb.ResponseHeader{ClusterId: 0xc1, MemberId: 0xe1, Revision: 42, RaftTerm: 1}
	for _, tc := range []struct {
		name  string
		sizes []int
		// The limit: limit, or with fit the size of a fragment of the
		// first fit events, plus slack.
		limit, fit, slack int
		want              []int // events per response
	}{
		{name: "under the limit", sizes: []int{100, 100, 100}, limit: 10000, want: []int{3}},
		{name: "one event over the limit", sizes: []int{1000}, limit: 200, want: []int{1}},
		{name: "split", sizes: []int{100, 100, 100, 100, 100}, limit: 250, want: []int{2, 2, 1}},
		{name: "an event over the limit goes alone", sizes: []int{100, 300, 100}, limit: 250, want: []int{1, 1, 1}},
		{name: "two fit, one byte under", sizes: []int{100, 100, 100, 100, 100}, fit: 2, slack: 1, want: []int{2, 2, 1}},
		{name: "two reach the limit", sizes: []int{100, 100, 100, 100, 100}, fit: 2, want: []int{1, 1, 1, 1, 1}},
		{name: "larger events later", sizes: []int{100, 100, 150, 150, 150}, fit: 2, slack: 1, want: []int{2, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &pb.WatchResponse{Header: hdr, WatchId: 3, Events: sizedEvents(t, tc.sizes...)}
			limit := tc.limit
			if tc.fit > 0 {
				limit = proto.Size(&pb.WatchResponse{Header: hdr, WatchId: 3, Fragment: true, Events: r.Events[:tc.fit]}) + tc.slack
			}
			frags := fragments(r, limit)
			if len(frags) == 1 && frags[0] != r {
				t.Fatal("a response that needs no fragments was copied")
			}
			var got []int
			var events []*mvccpb.Event
			for i, f := range frags {
				got = append(got, len(f.Events))
				events = append(events, f.Events...)
				if last := i == len(frags)-1; f.Fragment == last {
					t.Errorf("fragment %d of %d: Fragment %v", i+1, len(frags), f.Fragment)
				}
				if f.Header != r.Header || f.WatchId != r.WatchId {
					t.Errorf("fragment %d: header %v watch %d", i+1, f.Header, f.WatchId)
				}
				if len(frags) > 1 && len(f.Events) > 1 && proto.Size(f) >= limit {
					t.Errorf("fragment %d: %d bytes, limit %d", i+1, proto.Size(f), limit)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("responses of %v events, want %v", got, tc.want)
			}
			for i := range events {
				if events[i] != r.Events[i] {
					t.Fatalf("event %d out of order", i)
				}
			}
		})
	}

	// At exactly the limit a response is fragmented; one byte under, not.
	r := &pb.WatchResponse{Header: hdr, WatchId: 3, Events: sizedEvents(t, 100, 100, 100)}
	if frags := fragments(r, proto.Size(r)+1); len(frags) != 1 || frags[0] != r {
		t.Errorf("a response one byte under the limit went in %d fragments", len(frags))
	}
	if frags := fragments(r, proto.Size(r)); len(frags) < 2 {
		t.Errorf("a response at the limit was not fragmented")
	}
}

// sent lists the responses as "rev:events" (with "f" when flagged
// Fragment), checking what every response shares.
func sent(t *testing.T, rs []*pb.WatchResponse, id int64) string {
	t.Helper()
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r.WatchId != id || r.Header.ClusterId != 0xc1 || r.Header.MemberId != 0xe1 || r.Header.RaftTerm != 1 {
			t.Fatalf("response %d: watch %d header %v", i, r.WatchId, r.Header)
		}
		parts[i] = fmt.Sprintf("%d:%d", r.Header.Revision, len(r.Events))
		if r.Fragment {
			parts[i] += "f"
		}
	}
	return strings.Join(parts, " ")
}

func TestSendEvents(t *testing.T) {
	// 1200 events, three per revision from 10 on: the 1000th event's
	// revision runs to the 1002nd.
	var many []*mvcc.Event
	for i := range 1200 {
		many = append(many, putEv(fmt.Sprint(i), 10+int64(i/3), nil))
	}
	big := []*mvcc.Event{putEv("a", 5, nil), putEv("b", 5, nil), putEv("c", 6, nil)}
	for _, e := range big {
		e.Kv.Value = []byte(strings.Repeat("x", 400))
	}
	for _, tc := range []struct {
		name     string
		w        watcher
		evs      []*mvcc.Event
		rev      int64
		maxBytes int
		want     string
	}{
		{name: "nothing to send", w: watcher{id: 1, noPut: true}, evs: big, rev: 6, want: ""},
		{name: "one response", w: watcher{id: 1}, evs: big, rev: 9, want: "9:3"},
		// Every header carries the store's revision, as etcd's do while a
		// watcher catches up, never the last event's: headers never go
		// backwards from one step to the next.
		{name: "over maxEventsPerResp, split between revisions", w: watcher{id: 2}, evs: many, rev: 900, want: "900:1002 900:198"},
		{name: "large, not asked to fragment", w: watcher{id: 3}, evs: big, rev: 6, maxBytes: 500, want: "6:3"},
		{name: "large, fragmented", w: watcher{id: 4, fragment: true}, evs: big, rev: 7, maxBytes: 500, want: "7:1f 7:1f 7:1"},
		{name: "asked to fragment, fits", w: watcher{id: 5, fragment: true}, evs: big, rev: 6, maxBytes: 1 << 20, want: "6:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, cs := newTestStream(&fakeBackend{}, tc.maxBytes)
			if err := st.sendEvents(&tc.w, tc.evs, tc.rev); err != nil {
				t.Fatal(err)
			}
			if got := sent(t, cs.sent, tc.w.id); got != tc.want {
				t.Fatalf("sent %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDeliverCancelsBelowFloor(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *fakeBackend
		want *pb.WatchResponse
	}{
		{
			name: "history pruned before the read",
			b: &fakeBackend{events: func(from, to int64) ([]*mvcc.Event, error) {
				return nil, &mvcc.BelowFloorError{Floor: 8}
			}},
			want: &pb.WatchResponse{WatchId: 1, Canceled: true, CompactRevision: 8},
		},
		{
			// Retention raised its floor past the watcher while it read: the
			// read may have missed pruned events.
			name: "floor raised during the read",
			b: &fakeBackend{floor: 9, retainFloor: 6, events: func(from, to int64) ([]*mvcc.Event, error) {
				return []*mvcc.Event{putEv("a", 6, nil)}, nil
			}},
			want: &pb.WatchResponse{WatchId: 1, Canceled: true, CompactRevision: 9},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, cs := newTestStream(tc.b, 0)
			st.watchers[1] = &watcher{id: 1, next: 5, kr: mvcc.NewKeyRange([]byte("a"), nil)}
			behind, err := st.deliver(context.Background(), 12)
			if err != nil || behind {
				t.Fatalf("deliver: behind %v, %v", behind, err)
			}
			if len(cs.sent) != 1 || st.watchers[1] != nil {
				t.Fatalf("sent %v, watchers %v", cs.sent, st.watchers)
			}
			got := cs.sent[0]
			// etcd sends this answer with revision 0 in its header.
			if got.Header.Revision != 0 || got.WatchId != tc.want.WatchId || !got.Canceled || got.CompactRevision != tc.want.CompactRevision || len(got.Events) != 0 {
				t.Fatalf("sent %v, want %v at revision 0", got, tc.want)
			}
		})
	}
}

// A read that stops short of what was asked (the log's byte bound) moves
// the watcher on only as far as it read: the next delivery asks for the
// rest, and the watcher counts as behind until it has it. After a short
// read it asks for twice what it got, not for the whole step again, and
// after a full one it asks for twice as much, up to catchUpRevisions.
func TestDeliverResumesAfterAShortRead(t *testing.T) {
	b := &fakeBackend{readRevs: 3, events: func(from, to int64) ([]*mvcc.Event, error) {
		var evs []*mvcc.Event
		for r := from; r <= to; r++ {
			evs = append(evs, putEv("a", r, nil))
		}
		return evs, nil
	}}
	st, cs := newTestStream(b, 0)
	st.watchers[1] = &watcher{id: 1, next: 5, kr: mvcc.NewKeyRange([]byte("a"), nil)}
	const rev = 20
	for i := 0; ; i++ {
		behind, err := st.deliver(context.Background(), rev)
		if err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			t.Fatalf("still behind after %d deliveries (asked %v)", i+1, b.asked)
		}
		if !behind {
			break
		}
	}
	var got []int64
	for _, r := range cs.sent {
		for _, e := range r.Events {
			got = append(got, e.Kv.ModRevision)
		}
	}
	var want []int64
	for r := int64(5); r <= rev; r++ {
		want = append(want, r)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events at %v, want %v (asked %v)", got, want, b.asked)
	}
	if w := [][2]int64{{5, 20}, {8, 13}, {11, 16}, {14, 19}, {17, 20}, {20, 20}}; !slices.Equal(b.asked, w) {
		t.Fatalf("asked %v, want %v", b.asked, w)
	}
	if st.watchers[1].next != rev+1 {
		t.Fatalf("next %d, want %d", st.watchers[1].next, rev+1)
	}
}

// TestCreate follows etcd v3.6.16's recvLoop and watchStream.Watch: a create
// etcd refuses is answered created and canceled with watch ID -1, takes no
// ID, and leaves the stream's watches as they were.
func TestCreate(t *testing.T) {
	st, cs := newTestStream(&fakeBackend{floor: 4}, 0)
	const rev = 10
	for i, tc := range []struct {
		req  *pb.WatchCreateRequest
		want string // id, then canceled and the reason or compact revision
	}{
		{&pb.WatchCreateRequest{Key: []byte("a")}, "0"},
		{&pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a")}, "-1 canceled mvcc: watcher range is empty"},
		{&pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("b")}, "-1 canceled mvcc: watcher range is empty"},
		{&pb.WatchCreateRequest{Key: []byte("a")}, "1"},
		{&pb.WatchCreateRequest{Key: []byte("a"), WatchId: 1}, "-1 canceled mvcc: duplicate watch ID provided on the WatchStream"},
		{&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: -1}, "-1 canceled etcdserver: mvcc: required revision has been compacted"},
		// Checked before the range, as etcd's recvLoop does.
		{&pb.WatchCreateRequest{Key: []byte("b"), RangeEnd: []byte("a"), StartRevision: -5}, "-1 canceled etcdserver: mvcc: required revision has been compacted"},
		{&pb.WatchCreateRequest{Key: []byte("a"), WatchId: 5}, "5"},
		{&pb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte{0}}, "2"},
		{&pb.WatchCreateRequest{RangeEnd: []byte{0}}, "3"},
		{&pb.WatchCreateRequest{Key: []byte("z")}, "4"},
		{&pb.WatchCreateRequest{Key: []byte("z")}, "6"}, // 5 is taken
		// Below the floor: created, then canceled on its own ID, not kept.
		{&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 3}, "7 / 7 canceled compact 4"},
		{&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 4}, "8"},
	} {
		cs.sent = nil
		if err := st.create(tc.req, rev); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range cs.sent {
			// etcd's compaction answer carries revision 0, every other the
			// store's.
			want := int64(rev)
			if r.CompactRevision != 0 {
				want = 0
			}
			if r.Header.Revision != want {
				t.Fatalf("create %d: header revision %d, want %d", i, r.Header.Revision, want)
			}
			s := fmt.Sprint(r.WatchId)
			if r.Canceled {
				s += " canceled"
			}
			if r.CancelReason != "" {
				s += " " + r.CancelReason
			}
			if r.CompactRevision != 0 {
				s += fmt.Sprintf(" compact %d", r.CompactRevision)
			}
			if r.Created != (len(got) == 0) || len(r.Events) != 0 {
				t.Fatalf("create %d: response %d: %v", i, len(got), r)
			}
			got = append(got, s)
		}
		if g := strings.Join(got, " / "); g != tc.want {
			t.Fatalf("create %d (%v): answered %q, want %q", i, tc.req, g, tc.want)
		}
	}
	var ids []int64
	for _, w := range st.sorted() {
		ids = append(ids, w.id)
	}
	if fmt.Sprint(ids) != "[0 1 2 3 4 5 6 8]" {
		t.Fatalf("live watches %v", ids)
	}
	if w := st.watchers[8]; w.next != 4 {
		t.Fatalf("watch 8 starts at %d", w.next)
	}
	if w := st.watchers[0]; w.next != rev+1 {
		t.Fatalf("watch 0 starts at %d, want the next revision", w.next)
	}
}

// TestStreamSaysWhereItStands: the store learns the oldest revision a
// watcher on the stream has not been sent, as watchers come, read and go,
// so that the ring keeps those events in memory and lets the rest go.
func TestStreamSaysWhereItStands(t *testing.T) {
	b := &fakeBackend{readRevs: 3, events: func(from, to int64) ([]*mvcc.Event, error) {
		var evs []*mvcc.Event
		for r := from; r <= to; r++ {
			evs = append(evs, putEv("a", r, nil))
		}
		return evs, nil
	}}
	st, _ := newTestStream(b, 0)
	const rev = 20
	step := func(what string, do func() error, want int64) {
		t.Helper()
		if err := do(); err != nil {
			t.Fatal(err)
		}
		at := b.follower.at
		if len(at) == 0 || at[len(at)-1] != want {
			t.Fatalf("after %s the stream said %v, want %d last", what, at, want)
		}
	}
	create := func(start int64) func() error {
		return func() error {
			return st.handle(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("a"), StartRevision: start}}}, rev)
		}
	}
	cancel := func(id int64) func() error {
		return func() error {
			return st.handle(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}, rev)
		}
	}
	deliver := func() error { _, err := st.deliver(context.Background(), rev); return err }

	step("a watcher from now", create(0), rev+1)
	step("one from revision 5", create(5), 5)
	step("a delivery of three revisions", deliver, 8)
	step("another", deliver, 11)
	step("one from revision 3", create(3), 3)
	step("that one canceled", cancel(2), 11)
	b.retainFloor = 15
	step("a delivery that finds the one behind pruned", deliver, rev+1)
	if _, ok := st.watchers[1]; ok {
		t.Fatal("the watcher below the retention floor is still on the stream")
	}
	step("the last canceled", cancel(0), math.MaxInt64)
}

// eofStream is a Watch stream whose client has gone.
type eofStream struct {
	captureStream
	ctx context.Context
}

func (e *eofStream) Recv() (*pb.WatchRequest, error) { return nil, io.EOF }
func (e *eofStream) Context() context.Context        { return e.ctx }

// TestWatchClosesItsFollower: a stream that ends lets go of the events
// it had not read; otherwise the ring would keep them for nobody.
func TestWatchClosesItsFollower(t *testing.T) {
	b := &fakeBackend{}
	ws := &watchServer{s: New(Config{Backend: b})}
	if err := ws.Watch(&eofStream{ctx: t.Context()}); err != io.EOF {
		t.Fatalf("Watch returned %v, want EOF", err)
	}
	if !b.follower.closed {
		t.Fatal("the stream ended without closing its follower")
	}
}
