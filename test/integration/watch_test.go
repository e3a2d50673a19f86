package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/test/framework"
)

// rawWatch is one gRPC Watch stream driven by hand, to see watch IDs,
// fragments and progress responses exactly as the server sends them.
type rawWatch struct {
	t      *testing.T
	stream pb.Watch_WatchClient
	ch     chan *pb.WatchResponse
}

func openRawWatch(t *testing.T, ctx context.Context, cli *clientv3.Client) *rawWatch {
	t.Helper()
	stream, err := pb.NewWatchClient(cli.ActiveConnection()).Watch(ctx)
	must(t, err)
	w := &rawWatch{t: t, stream: stream, ch: make(chan *pb.WatchResponse, 1024)}
	go func() {
		defer close(w.ch)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case w.ch <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

func (w *rawWatch) send(req *pb.WatchRequest) {
	w.t.Helper()
	if err := w.stream.Send(req); err != nil {
		w.t.Fatalf("watch send: %v", err)
	}
}

func (w *rawWatch) recv(timeout time.Duration) *pb.WatchResponse {
	w.t.Helper()
	select {
	case resp, ok := <-w.ch:
		if !ok {
			w.t.Fatalf("watch stream closed")
		}
		return resp
	case <-time.After(timeout):
		w.t.Fatalf("no watch response within %v", timeout)
	}
	return nil
}

// create sends a create request and returns the created response.
func (w *rawWatch) create(req *pb.WatchCreateRequest) *pb.WatchResponse {
	w.t.Helper()
	w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}})
	resp := w.recv(10 * time.Second)
	if !resp.Created {
		w.t.Fatalf("expected a created response, got %+v", resp)
	}
	return resp
}

func (w *rawWatch) requestProgress() {
	w.t.Helper()
	w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
}

func (w *rawWatch) cancel(id int64) {
	w.t.Helper()
	w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
}

func TestWatchKey(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		wch := watchCreated(t, ctx, cli, "a")
		_, err := cli.Put(ctx, "a", "1") // 2
		must(t, err)
		_, err = cli.Put(ctx, "b", "1") // 3
		must(t, err)
		_, err = cli.Put(ctx, "a", "2") // 4
		must(t, err)
		_, err = cli.Put(ctx, "ab", "1") // 5
		must(t, err)
		_, err = cli.Delete(ctx, "a") // 6
		must(t, err)
		_, err = cli.Put(ctx, "a", "3") // 7
		must(t, err)

		evs := collectEvents(t, wch, 4, 10*time.Second)
		want := []string{
			`PUT {key="a" value="1" create=2 mod=2 version=1 lease=0}`,
			`PUT {key="a" value="2" create=2 mod=4 version=2 lease=0}`,
			`DELETE {key="a" value="" create=0 mod=6 version=0 lease=0}`,
			`PUT {key="a" value="3" create=7 mod=7 version=1 lease=0}`,
		}
		for i := range want {
			if got := evString(evs[i]); got != want[i] {
				t.Fatalf("event %d = %s, want %s", i, got, want[i])
			}
		}
		if !evs[0].IsCreate() || evs[1].IsCreate() || !evs[3].IsCreate() || !evs[1].IsModify() {
			t.Fatalf("create/modify flags wrong")
		}
		noMoreEvents(t, wch, 200*time.Millisecond)
	})
}

func TestWatchRangePrefixFromKey(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		prefix := watchCreated(t, ctx, cli, "p/", clientv3.WithPrefix())
		rng := watchCreated(t, ctx, cli, "r1", clientv3.WithRange("r3"))
		from := watchCreated(t, ctx, cli, "x", clientv3.WithFromKey())
		all := watchCreated(t, ctx, cli, "", clientv3.WithPrefix())

		keys := []string{"p", "p/1", "p0", "r0", "r1", "r2", "r2/x", "r3", "w", "x", "y", "\xff"}
		for _, k := range keys { // revisions 2..13
			_, err := cli.Put(ctx, k, "v")
			must(t, err)
		}
		check := func(name string, wch clientv3.WatchChan, want ...string) {
			t.Helper()
			evs := collectEvents(t, wch, len(want), 10*time.Second)
			var got []string
			for _, ev := range evs {
				got = append(got, string(ev.Kv.Key))
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("%s watch: keys %q, want %q", name, got, want)
			}
		}
		check("prefix", prefix, "p/1")
		check("range", rng, "r1", "r2", "r2/x")
		check("from key", from, "x", "y", "\xff")
		check("all", all, keys...)
		for _, wch := range []clientv3.WatchChan{prefix, rng, from} {
			noMoreEvents(t, wch, 100*time.Millisecond)
		}
	})
}

func TestWatchFromPastThenLive(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		const before, during = 30, 300
		put := func(i int) {
			_, err := cli.Put(ctx, fmt.Sprintf("w/%d", i%7), strconv.Itoa(i)) // revision i+2
			if err != nil {
				t.Errorf("put %d: %v", i, err)
			}
		}
		for i := range before {
			put(i)
		}
		const start = 10
		wch := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithPrevKV())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := before; i < before+during; i++ {
				put(i)
			}
		}()
		last := int64(before + during + 1)
		evs := collectEvents(t, wch, int(last-start+1), 60*time.Second)
		wg.Wait()
		for i, ev := range evs {
			rev := int64(start + i)
			if ev.Kv.ModRevision != rev || ev.Type != clientv3.EventTypePut || string(ev.Kv.Value) != strconv.FormatInt(rev-2, 10) {
				t.Fatalf("event %d = %s, want PUT at %d (a gap or a duplicate)", i, evString(ev), rev)
			}
			if rev-2 >= 7 {
				if ev.PrevKv == nil || ev.PrevKv.ModRevision != rev-7 {
					t.Fatalf("event at %d: prev_kv %s, want mod %d", rev, kvString(ev.PrevKv), rev-7)
				}
			}
		}
		noMoreEvents(t, wch, 200*time.Millisecond)
	})
}

func TestWatchFutureStartRevision(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		wch := cli.Watch(ctx, "k", clientv3.WithRev(4))
		for i := range 4 { // 2..5
			_, err := cli.Put(ctx, "k", strconv.Itoa(i))
			must(t, err)
		}
		evs := collectEvents(t, wch, 2, 10*time.Second)
		if evs[0].Kv.ModRevision != 4 || evs[1].Kv.ModRevision != 5 {
			t.Fatalf("events at %d,%d, want 4,5", evs[0].Kv.ModRevision, evs[1].Kv.ModRevision)
		}
	})
}

func TestWatchPrevKV(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		live := watchCreated(t, ctx, cli, "k", clientv3.WithPrevKV())
		_, err := cli.Put(ctx, "k", "v1") // 2
		must(t, err)
		_, err = cli.Put(ctx, "k", "v2") // 3
		must(t, err)
		_, err = cli.Delete(ctx, "k") // 4
		must(t, err)
		_, err = cli.Put(ctx, "k", "v3") // 5
		must(t, err)
		want := []string{
			`PUT {key="k" value="v1" create=2 mod=2 version=1 lease=0}`,
			`PUT {key="k" value="v2" create=2 mod=3 version=2 lease=0} prev={key="k" value="v1" create=2 mod=2 version=1 lease=0}`,
			`DELETE {key="k" value="" create=0 mod=4 version=0 lease=0} prev={key="k" value="v2" create=2 mod=3 version=2 lease=0}`,
			`PUT {key="k" value="v3" create=5 mod=5 version=1 lease=0}`,
		}
		for name, wch := range map[string]clientv3.WatchChan{
			"live": live,
			"past": cli.Watch(ctx, "k", clientv3.WithPrevKV(), clientv3.WithRev(1)),
		} {
			evs := collectEvents(t, wch, 4, 10*time.Second)
			for i := range want {
				if got := evString(evs[i]); got != want[i] {
					t.Fatalf("%s event %d = %s, want %s", name, i, got, want[i])
				}
			}
		}
		// Without prev_kv, none is sent.
		evs := collectEvents(t, cli.Watch(ctx, "k", clientv3.WithRev(3)), 3, 10*time.Second)
		for _, ev := range evs {
			if ev.PrevKv != nil {
				t.Fatalf("prev_kv sent unasked: %s", evString(ev))
			}
		}
	})
}

func TestWatchFilters(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		noPut := watchCreated(t, ctx, cli, "k", clientv3.WithPrefix(), clientv3.WithFilterPut())
		noDel := watchCreated(t, ctx, cli, "k", clientv3.WithPrefix(), clientv3.WithFilterDelete())
		_, err := cli.Put(ctx, "k1", "v") // 2
		must(t, err)
		_, err = cli.Delete(ctx, "k1") // 3
		must(t, err)
		_, err = cli.Put(ctx, "k2", "v") // 4
		must(t, err)
		_, err = cli.Delete(ctx, "k", clientv3.WithPrefix()) // 5
		must(t, err)
		_, err = cli.Put(ctx, "k3", "v") // 6
		must(t, err)

		evs := collectEvents(t, noPut, 2, 10*time.Second)
		if evs[0].Type != clientv3.EventTypeDelete || evs[0].Kv.ModRevision != 3 || evs[1].Type != clientv3.EventTypeDelete || evs[1].Kv.ModRevision != 5 {
			t.Fatalf("NOPUT watch: %s, %s", evString(evs[0]), evString(evs[1]))
		}
		evs = collectEvents(t, noDel, 3, 10*time.Second)
		for i, rev := range []int64{2, 4, 6} {
			if evs[i].Type != clientv3.EventTypePut || evs[i].Kv.ModRevision != rev {
				t.Fatalf("NODELETE watch event %d: %s", i, evString(evs[i]))
			}
		}
		noMoreEvents(t, noPut, 100*time.Millisecond)
		noMoreEvents(t, noDel, 100*time.Millisecond)
	})
}

func TestWatchRequestProgress(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		wch := watchCreated(t, ctx, cli, "p", clientv3.WithPrefix())
		_, err := cli.Put(ctx, "p1", "v") // 2
		must(t, err)
		_, err = cli.Put(ctx, "p2", "v") // 3
		must(t, err)
		must(t, cli.RequestProgress(ctx))
		// The two events come first, then the progress notification at 3.
		var revs []int64
		for deadline := time.Now().Add(10 * time.Second); ; {
			if time.Now().After(deadline) {
				t.Fatalf("no progress notification; events %v", revs)
			}
			wr := <-wch
			if err := wr.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			if wr.IsProgressNotify() {
				if wr.Header.Revision != 3 {
					t.Fatalf("progress revision %d, want 3", wr.Header.Revision)
				}
				break
			}
			for _, ev := range wr.Events {
				revs = append(revs, ev.Kv.ModRevision)
			}
		}
		if len(revs) != 2 || revs[0] != 2 || revs[1] != 3 {
			t.Fatalf("events before progress: %v, want [2 3]", revs)
		}
		// Progress reports the store's revision, also when the writes are to
		// keys this stream does not watch.
		_, err = cli.Put(ctx, "q", "v") // 4
		must(t, err)
		must(t, cli.RequestProgress(ctx))
		select {
		case wr := <-wch:
			if !wr.IsProgressNotify() || wr.Header.Revision != 4 {
				t.Fatalf("progress after unwatched write: %+v (events %d), want progress at 4", wr.Header, len(wr.Events))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no progress notification for revision 4")
		}
	})
}

// TestWatchRequestProgressRaw checks the wire form of a requested progress
// notification (watch_id -1, no events, header revision = current) and that
// it never overtakes events: a progress response at R comes only after every
// event <= R was sent on the stream.
func TestWatchRequestProgressRaw(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		const n = 300
		for i := range n { // revisions 2..301
			_, err := cli.Put(ctx, fmt.Sprintf("h/%03d", i%50), strconv.Itoa(i))
			must(t, err)
		}
		w := openRawWatch(t, ctx, cli)
		created := w.create(&pb.WatchCreateRequest{Key: []byte("h/"), RangeEnd: []byte("h0"), StartRevision: 2})
		if created.WatchId != 0 || created.Header.Revision != n+1 {
			t.Fatalf("created: watch id %d header rev %d, want 0 and %d", created.WatchId, created.Header.Revision, n+1)
		}
		// Ask for progress while the watcher is catching up.
		for range 5 {
			w.requestProgress()
		}
		var lastEvent int64 = 1
		progress := 0
		for deadline := time.Now().Add(20 * time.Second); lastEvent < n+1 || progress == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("last event %d, %d progress responses", lastEvent, progress)
			}
			resp := w.recv(10 * time.Second)
			if len(resp.Events) == 0 {
				if resp.WatchId != -1 || resp.Canceled || resp.Created || resp.CompactRevision != 0 {
					t.Fatalf("progress response: %+v", resp)
				}
				if r := resp.Header.Revision; lastEvent < min(r, n+1) {
					t.Fatalf("progress at %d sent before the event at %d", r, lastEvent+1)
				}
				progress++
				continue
			}
			if resp.WatchId != 0 {
				t.Fatalf("events for watch id %d", resp.WatchId)
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision != lastEvent+1 {
					t.Fatalf("event at %d after %d", ev.Kv.ModRevision, lastEvent)
				}
				lastEvent = ev.Kv.ModRevision
			}
			if lastEvent == n+1 && progress == 0 {
				// Caught up: now a request must be answered.
				w.requestProgress()
			}
		}
		t.Logf("%d progress responses while catching up", progress)
		// Once synced, a request is answered with the current revision.
		_, err := cli.Put(ctx, "other", "v") // n+2
		must(t, err)
		w.requestProgress()
		for i := 0; ; i++ {
			if i == 20 {
				t.Fatalf("no progress at revision %d", n+2)
			}
			resp := w.recv(10 * time.Second)
			if len(resp.Events) != 0 {
				t.Fatalf("unexpected events %v", resp.Events)
			}
			if resp.Header.Revision == n+2 {
				if resp.WatchId != -1 {
					t.Fatalf("progress watch id %d, want -1", resp.WatchId)
				}
				break
			}
			if resp.Header.Revision > n+2 || resp.Header.Revision < n+1 {
				t.Fatalf("progress at %d", resp.Header.Revision)
			}
		}
	})
}

func TestWatchProgressNotifyPeriodic(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		_, err := cli.Put(ctx, "unwatched", "v") // 2
		must(t, err)

		w := openRawWatch(t, ctx, cli)
		w.create(&pb.WatchCreateRequest{Key: []byte("a"), StartRevision: 3})
		pn := w.create(&pb.WatchCreateRequest{Key: []byte("k"), ProgressNotify: true})
		if pn.WatchId != 1 {
			t.Fatalf("second watch id %d, want 1", pn.WatchId)
		}
		resp := w.recv(progressWait)
		if len(resp.Events) != 0 || resp.Header.Revision != 2 || resp.WatchId != pn.WatchId {
			t.Fatalf("periodic progress: watch id %d rev %d events %d, want id %d rev 2 no events",
				resp.WatchId, resp.Header.Revision, len(resp.Events), pn.WatchId)
		}
		_, err = cli.Put(ctx, "unwatched", "v") // 3
		must(t, err)
		for deadline := time.Now().Add(progressWait); ; {
			resp = w.recv(progressWait)
			if resp.WatchId != pn.WatchId || len(resp.Events) != 0 {
				t.Fatalf("unexpected response %+v", resp)
			}
			if resp.Header.Revision == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no periodic progress at revision 3")
			}
		}

		// Through the client: IsProgressNotify with the current revision.
		wch := watchCreated(t, ctx, cli, "z", clientv3.WithProgressNotify())
		select {
		case wr := <-wch:
			if !wr.IsProgressNotify() || wr.Header.Revision != 3 {
				t.Fatalf("client progress notify: %+v", wr)
			}
		case <-time.After(progressWait):
			t.Fatalf("no progress notification within %v", progressWait)
		}
	})
}

func TestWatchCancel(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		// Client side: cancelling the context closes the channel.
		wctx, cancel := context.WithCancel(ctx)
		wch := watchCreated(t, wctx, cli, "k")
		cancel()
		timeout := time.After(10 * time.Second)
		for open := true; open; {
			select {
			case _, open = <-wch:
			case <-timeout:
				t.Fatalf("watch channel not closed after cancel")
			}
		}

		// Wire: a cancel request is answered canceled with that watch id.
		w := openRawWatch(t, ctx, cli)
		a := w.create(&pb.WatchCreateRequest{Key: []byte("k")})
		b := w.create(&pb.WatchCreateRequest{Key: []byte("k")})
		if a.WatchId != 0 || b.WatchId != 1 {
			t.Fatalf("watch ids %d, %d, want 0, 1", a.WatchId, b.WatchId)
		}
		w.cancel(a.WatchId)
		resp := w.recv(10 * time.Second)
		if !resp.Canceled || resp.WatchId != a.WatchId || len(resp.Events) != 0 {
			t.Fatalf("cancel response: %+v", resp)
		}
		_, err := cli.Put(ctx, "k", "v") // 2
		must(t, err)
		resp = w.recv(10 * time.Second)
		if resp.WatchId != b.WatchId || len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != 2 {
			t.Fatalf("after cancel: %+v", resp)
		}
		select {
		case resp := <-w.ch:
			t.Fatalf("event for a canceled watcher: %+v", resp)
		case <-time.After(200 * time.Millisecond):
		}
	})
}

func TestWatchManyOnOneStream(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		w := openRawWatch(t, ctx, cli)
		ids := map[string]int64{}
		for i, spec := range []struct{ name, key, end string }{{"a", "a", ""}, {"b", "b", ""}, {"all", "\x00", "\x00"}} {
			resp := w.create(&pb.WatchCreateRequest{Key: []byte(spec.key), RangeEnd: []byte(spec.end)})
			if resp.WatchId != int64(i) || resp.Header.Revision != 1 {
				t.Fatalf("watch %s: id %d rev %d, want id %d rev 1", spec.name, resp.WatchId, resp.Header.Revision, i)
			}
			ids[spec.name] = resp.WatchId
		}
		_, err := cli.Put(ctx, "a", "1") // 2
		must(t, err)
		_, err = cli.Put(ctx, "b", "1") // 3
		must(t, err)
		got := map[int64][]int64{}
		for n := 0; n < 4; {
			resp := w.recv(10 * time.Second)
			for _, ev := range resp.Events {
				got[resp.WatchId] = append(got[resp.WatchId], ev.Kv.ModRevision)
				n++
			}
		}
		if fmt.Sprint(got[ids["a"]]) != "[2]" || fmt.Sprint(got[ids["b"]]) != "[3]" || fmt.Sprint(got[ids["all"]]) != "[2 3]" {
			t.Fatalf("events per watch id: %v", got)
		}

		// Through the client: 30 watchers share one stream, each gets its own.
		const n = 30
		chans := make([]clientv3.WatchChan, n)
		for i := range chans {
			chans[i] = watchCreated(t, ctx, cli, fmt.Sprintf("m/%02d", i))
		}
		for i := range n { // 4..33
			_, err := cli.Put(ctx, fmt.Sprintf("m/%02d", i), "v")
			must(t, err)
		}
		for i, wch := range chans {
			evs := collectEvents(t, wch, 1, 10*time.Second)
			if string(evs[0].Kv.Key) != fmt.Sprintf("m/%02d", i) || evs[0].Kv.ModRevision != int64(4+i) {
				t.Fatalf("watcher %d got %s", i, evString(evs[0]))
			}
		}
	})
}

func TestWatchFragment(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		big := func(c byte) string { return strings.Repeat(string(c), 700_000) }
		_, err := cli.Put(ctx, "f/1", big('a')) // 2
		must(t, err)
		_, err = cli.Put(ctx, "f/2", big('b')) // 3
		must(t, err)
		// One revision whose events with prev_kv are 2.8 MB, over the 1.5 MiB limit.
		tr, err := cli.Txn(ctx).Then(clientv3.OpPut("f/1", big('c')), clientv3.OpPut("f/2", big('d'))).Commit()
		must(t, err)
		if tr.Header.Revision != 4 {
			t.Fatalf("txn revision %d", tr.Header.Revision)
		}

		// Wire, with fragment: several messages, all but the last flagged.
		w := openRawWatch(t, ctx, cli)
		w.create(&pb.WatchCreateRequest{Key: []byte("f/"), RangeEnd: []byte("f0"), StartRevision: 4, PrevKv: true, Fragment: true})
		var msgs []*pb.WatchResponse
		var evs []*mvccpb.Event
		for len(evs) < 2 {
			resp := w.recv(10 * time.Second)
			msgs = append(msgs, resp)
			evs = append(evs, resp.Events...)
		}
		if len(msgs) < 2 || len(evs) != 2 {
			t.Fatalf("fragmented: %d messages, %d events", len(msgs), len(evs))
		}
		for i, m := range msgs {
			if m.Fragment != (i < len(msgs)-1) {
				t.Fatalf("message %d of %d: fragment=%v", i, len(msgs), m.Fragment)
			}
			if size := proto.Size(m); size > 1572864 && len(m.Events) > 1 {
				t.Fatalf("fragment %d is %d bytes with %d events", i, size, len(m.Events))
			}
		}
		for i, want := range []string{"c", "d"} {
			ev := evs[i]
			if ev.Kv.ModRevision != 4 || ev.Kv.Value[0] != want[0] || len(ev.Kv.Value) != 700_000 || ev.PrevKv == nil || len(ev.PrevKv.Value) != 700_000 {
				t.Fatalf("fragmented event %d wrong", i)
			}
		}

		// Wire, without fragment: one large message.
		w2 := openRawWatch(t, ctx, cli)
		w2.create(&pb.WatchCreateRequest{Key: []byte("f/"), RangeEnd: []byte("f0"), StartRevision: 4, PrevKv: true})
		resp := w2.recv(10 * time.Second)
		if len(resp.Events) != 2 || resp.Fragment {
			t.Fatalf("unfragmented: %d events, fragment=%v", len(resp.Events), resp.Fragment)
		}

		// The client reassembles fragments into one response.
		wch := cli.Watch(ctx, "f/", clientv3.WithPrefix(), clientv3.WithRev(4), clientv3.WithPrevKV(), clientv3.WithFragment())
		select {
		case wr := <-wch:
			if wr.Err() != nil || len(wr.Events) != 2 {
				t.Fatalf("client fragment: err %v, %d events", wr.Err(), len(wr.Events))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("client fragment: nothing")
		}
	})
}

func TestWatchCompacted(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		for i := range 5 { // 2..6
			_, err := cli.Put(ctx, "k", strconv.Itoa(i))
			must(t, err)
		}
		_, err := cli.Compact(ctx, 4)
		must(t, err)

		// From exactly the compact revision: works, from the past then live.
		wch := cli.Watch(ctx, "k", clientv3.WithRev(4), clientv3.WithPrevKV())
		evs := collectEvents(t, wch, 3, 10*time.Second)
		for i, ev := range evs {
			if ev.Kv.ModRevision != int64(4+i) || string(ev.Kv.Value) != strconv.Itoa(2+i) {
				t.Fatalf("event %d: %s", i, evString(ev))
			}
		}
		// etcd cannot read the previous value of the event at the compact
		// revision (it lies below the floor) and sends it without prev_kv; a
		// server that still has it may send it, but then it must be right.
		if p := evs[0].PrevKv; p != nil && (p.ModRevision != 3 || string(p.Value) != "1") {
			t.Fatalf("prev_kv of the event at the compact revision: %s", kvString(p))
		}
		for _, ev := range evs[1:] {
			if ev.PrevKv == nil || ev.PrevKv.ModRevision != ev.Kv.ModRevision-1 {
				t.Fatalf("prev_kv of %s", evString(ev))
			}
		}
		_, err = cli.Put(ctx, "k", "live") // 7
		must(t, err)
		evs = collectEvents(t, wch, 1, 10*time.Second)
		if evs[0].Kv.ModRevision != 7 {
			t.Fatalf("live event: %s", evString(evs[0]))
		}

		// From below it: canceled with the compact revision.
		wch = cli.Watch(ctx, "k", clientv3.WithRev(3))
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("channel closed without a response")
			}
			if !wr.Canceled || wr.CompactRevision != 4 || len(wr.Events) != 0 || wr.Err() != rpctypes.ErrCompacted {
				t.Fatalf("compacted watch: canceled %v compact_revision %d events %d err %v", wr.Canceled, wr.CompactRevision, len(wr.Events), wr.Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no response for a watch below the compact revision")
		}
		select {
		case wr, ok := <-wch:
			if ok {
				t.Fatalf("compacted watch channel still open: %+v", wr)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("compacted watch channel not closed")
		}

		// Wire: created, then canceled with compact_revision on the same id.
		w := openRawWatch(t, ctx, cli)
		created := w.create(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 2})
		resp := w.recv(10 * time.Second)
		if !resp.Canceled || resp.CompactRevision != 4 || resp.WatchId != created.WatchId || len(resp.Events) != 0 {
			t.Fatalf("raw compacted watch: %+v", resp)
		}
		// The stream stays usable.
		ok := w.create(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 7})
		if ok.Canceled {
			t.Fatalf("watch after a compacted one: %+v", ok)
		}
		resp = w.recv(10 * time.Second)
		if len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != 7 {
			t.Fatalf("watch from 7: %+v", resp)
		}
	})
}

// TestWatchCatchUpHeaders: a watcher far behind is sent its history in
// several responses, each with the store's revision in its header (as
// etcd's syncWatchers sends them), never the revision of its own last
// event: a header that went backwards would tell a client the store had
// gone back in time.
func TestWatchCatchUpHeaders(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		// More revisions than either server sends in one catch-up step
		// (etcd: 1000, QuantyKube: 2000).
		const writers, each = 10, 250
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					if _, err := cli.Put(ctx, fmt.Sprintf("c/%02d/%03d", g, i), "v"); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, err)
		}
		head := int64(1 + writers*each)
		wantRev(t, cli, head)

		w := openRawWatch(t, ctx, cli)
		w.create(&pb.WatchCreateRequest{Key: []byte("c/"), RangeEnd: []byte("c0"), StartRevision: 2})
		next, responses := int64(2), 0
		for next <= head {
			resp := w.recv(10 * time.Second)
			responses++
			if resp.Header.Revision != head {
				t.Fatalf("response %d (events %d..%d): header revision %d, want the store's %d",
					responses, resp.Events[0].Kv.ModRevision, resp.Events[len(resp.Events)-1].Kv.ModRevision, resp.Header.Revision, head)
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision != next {
					t.Fatalf("event at %d, want %d", ev.Kv.ModRevision, next)
				}
				next++
			}
		}
		if responses < 2 {
			t.Fatalf("the history came in %d response: nothing to check", responses)
		}
		t.Logf("%d revisions in %d responses", head-1, responses)
	})
}
