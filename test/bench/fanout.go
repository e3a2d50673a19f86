package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The fan-out workload: many watchers of one prefix on a few connections,
// and sequential puts under it, every event to every watcher. The watchers
// do not decode what they receive: a codec counts the events in each
// response on the wire, so the harness, which shares the machine's CPUs
// with the server, spends little on the 10^7 events and the figures are
// the server's.

const fanoutPrefix = "/registry/bench-fanout/"

type fanoutResult struct {
	watchers, puts int
	putTime        time.Duration // the sequential puts, first sent to last answered
	deliverTime    time.Duration // first put sent to last event received
	want           int64
	delivered      int64
	misordered     int64
	serverCPU      time.Duration // from the first put to the last event
}

func (r *fanoutResult) putRate() float64 { return float64(r.puts) / r.putTime.Seconds() }

// cpuPerEvent is the server's CPU time per delivered event.
func (r *fanoutResult) cpuPerEvent() time.Duration {
	if r.delivered == 0 {
		return 0
	}
	return r.serverCPU / time.Duration(r.delivered)
}

func (r *fanoutResult) String() string {
	return fmt.Sprintf("%.0f puts/s, %.2f µs server CPU per event, %d of %d events, %d misordered",
		r.putRate(), r.cpuPerEvent().Seconds()*1e6, r.delivered, r.want, r.misordered)
}

// watchFrame is one WatchResponse as the fan-out's watchers see it.
type watchFrame struct {
	id                int64
	created, canceled bool
	reason            string
	events            int
	firstRev, lastRev int64 // mod_revision of the first and last event
}

// frameCodec marshals requests as protobuf and reads responses into
// watchFrames without building the events.
type frameCodec struct{}

func (frameCodec) Name() string { return "proto" }

func (frameCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("frameCodec: cannot marshal %T", v)
	}
	return proto.Marshal(m)
}

func (frameCodec) Unmarshal(b []byte, v any) error {
	f, ok := v.(*watchFrame)
	if !ok {
		return fmt.Errorf("frameCodec: cannot unmarshal into %T", v)
	}
	*f = watchFrame{}
	return eachField(b, func(num protowire.Number, typ protowire.Type, val []byte, n uint64) error {
		switch {
		case num == 2 && typ == protowire.VarintType:
			f.id = int64(n)
		case num == 3 && typ == protowire.VarintType:
			f.created = n != 0
		case num == 4 && typ == protowire.VarintType:
			f.canceled = n != 0
		case num == 6 && typ == protowire.BytesType:
			f.reason = string(val)
		case num == 11 && typ == protowire.BytesType:
			rev, err := eventRev(val)
			if err != nil {
				return err
			}
			if f.events == 0 {
				f.firstRev = rev
			}
			f.lastRev = rev
			f.events++
		}
		return nil
	})
}

// eachField calls f with every field of the protobuf message b: its value
// as bytes for length-delimited fields, as n for varints.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, val []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		var val []byte
		var n uint64
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			val, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if err := f(num, typ, val, n); err != nil {
			return err
		}
	}
	return nil
}

// eventRev is the mod_revision of an encoded mvccpb.Event's kv.
func eventRev(ev []byte) (int64, error) {
	var rev int64
	err := eachField(ev, func(num protowire.Number, typ protowire.Type, kv []byte, _ uint64) error {
		if num != 2 || typ != protowire.BytesType {
			return nil
		}
		return eachField(kv, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
			if num == 3 && typ == protowire.VarintType {
				rev = int64(n)
			}
			return nil
		})
	})
	return rev, err
}

// fanoutStream is one connection's Watch stream and its watchers' counts.
// Its watchers are created with server-assigned IDs (kine assigns its own
// whatever the request asks), learnt from the created responses, which
// come in the order of the requests.
type fanoutStream struct {
	conn   *grpc.ClientConn
	stream grpc.ClientStream
	n      int
	ids    map[int64]int // watch ID -> watcher, as created; receive's own
	count  []int64       // events received per watcher
	last   []int64       // last revision received per watcher
	// created counts created responses.
	created    atomic.Int64
	misordered atomic.Int64
	err        atomic.Value // string
}

var watchStreamDesc = &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true, ClientStreams: true}

// openFanoutStream opens a Watch stream and asks for n watchers of prefix,
// each with prev_kv when prevKV is set.
func openFanoutStream(ctx context.Context, addr, prefix string, n int, prevKV bool) (*fanoutStream, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(frameCodec{}), grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		return nil, err
	}
	stream, err := conn.NewStream(ctx, watchStreamDesc, "/etcdserverpb.Watch/Watch")
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &fanoutStream{conn: conn, stream: stream, n: n, ids: map[int64]int{}, count: make([]int64, n), last: make([]int64, n)}
	for i := 0; i < n; i++ {
		req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte(prefix), RangeEnd: []byte(prefixEnd(prefix)), PrevKv: prevKV,
		}}}
		if err := stream.SendMsg(req); err != nil {
			conn.Close()
			return nil, fmt.Errorf("create watch: %w", err)
		}
	}
	return s, nil
}

// waitCreated waits until every watcher on s has been created.
func (s *fanoutStream) waitCreated(deadline time.Time) error {
	for s.created.Load() < int64(s.n) {
		if e, _ := s.err.Load().(string); e != "" {
			return errors.New(e)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d watchers created", s.created.Load(), s.n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// receive reads responses until the stream ends, adding each event to
// total.
func (s *fanoutStream) receive(total *atomic.Int64) {
	for {
		var f watchFrame
		if err := s.stream.RecvMsg(&f); err != nil {
			s.err.CompareAndSwap(nil, err.Error())
			return
		}
		switch {
		case f.canceled:
			s.err.CompareAndSwap(nil, fmt.Sprintf("watch %d canceled: %s", f.id, f.reason))
			continue
		case f.created:
			if _, dup := s.ids[f.id]; dup || len(s.ids) == s.n {
				s.err.CompareAndSwap(nil, fmt.Sprintf("watch %d created twice or unasked", f.id))
				continue
			}
			s.ids[f.id] = len(s.ids)
			s.created.Add(1)
		}
		i, ok := s.ids[f.id]
		if !ok {
			// A progress response to the whole stream (ID -1) carries no events.
			if f.events > 0 {
				s.err.CompareAndSwap(nil, fmt.Sprintf("events for watch %d, not on this stream", f.id))
			}
			continue
		}
		if f.events > 0 {
			if f.firstRev <= s.last[i] {
				s.misordered.Add(1)
			}
			s.last[i] = f.lastRev
			s.count[i] += int64(f.events)
			total.Add(int64(f.events))
		}
	}
}

// watchSet is a workload's Watch streams, each read by a goroutine of its
// own, and the events they received in all.
type watchSet struct {
	ctx     context.Context
	cancel  context.CancelFunc
	addr    string
	streams []*fanoutStream
	wg      sync.WaitGroup
	total   atomic.Int64
}

func newWatchSet(ctx context.Context, addr string) *watchSet {
	wctx, cancel := context.WithCancel(ctx)
	return &watchSet{ctx: wctx, cancel: cancel, addr: addr}
}

// open opens a stream with n watchers of prefix and starts reading it.
func (ws *watchSet) open(prefix string, n int, prevKV bool) error {
	s, err := openFanoutStream(ws.ctx, ws.addr, prefix, n, prevKV)
	if err != nil {
		return err
	}
	ws.streams = append(ws.streams, s)
	ws.wg.Add(1)
	go func() { defer ws.wg.Done(); s.receive(&ws.total) }()
	return nil
}

// waitCreated waits until every stream's watchers have been created.
func (ws *watchSet) waitCreated(deadline time.Time) error {
	for _, s := range ws.streams {
		if err := s.waitCreated(deadline); err != nil {
			return err
		}
	}
	return nil
}

// check counts the events received out of revision order, and returns
// the first error a stream met.
func (ws *watchSet) check() (misordered int64, err error) {
	for _, s := range ws.streams {
		misordered += s.misordered.Load()
		if e, _ := s.err.Load().(string); e != "" && err == nil {
			err = fmt.Errorf("watch stream: %s", e)
		}
	}
	return misordered, err
}

// close ends the streams and waits for their readers.
func (ws *watchSet) close() {
	ws.cancel()
	for _, s := range ws.streams {
		s.conn.Close()
	}
	ws.wg.Wait()
}

// runFanout creates the watchers, makes the puts one after another, and
// waits (at most wait) for every event to reach every watcher.
func runFanout(ctx context.Context, srv *server, ec extraConfig) (*fanoutResult, error) {
	res := &fanoutResult{watchers: ec.fanWatchers, puts: ec.fanPuts, want: int64(ec.fanWatchers) * int64(ec.fanPuts)}
	ws := newWatchSet(ctx, strings.TrimPrefix(srv.endpoint, "http://"))
	defer ws.close()
	per := ec.fanWatchers / ec.fanConns
	for c := 0; c < ec.fanConns; c++ {
		n := per
		if c == ec.fanConns-1 {
			n = ec.fanWatchers - per*(ec.fanConns-1)
		}
		if err := ws.open(fanoutPrefix, n, false); err != nil {
			return nil, err
		}
	}
	// Every watcher created before the first put.
	if err := ws.waitCreated(time.Now().Add(2 * time.Minute)); err != nil {
		return nil, err
	}

	c, err := newClient(srv.endpoint)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	val := strings.Repeat("v", ec.valueSize)
	cpu0, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for i := 0; i < ec.fanPuts; i++ {
		pctx, pcancel := context.WithTimeout(ctx, ec.reqTimeout)
		_, err := c.Put(pctx, fmt.Sprintf("%sk%06d", fanoutPrefix, i), val)
		pcancel()
		if err != nil {
			return nil, fmt.Errorf("put %d: %w", i, err)
		}
	}
	res.putTime = time.Since(t0)
	end := t0.Add(ec.fanWait)
	for ws.total.Load() < res.want && time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	res.deliverTime = time.Since(t0)
	cpu1, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	res.serverCPU = cpu1 - cpu0
	res.delivered = ws.total.Load()
	if res.misordered, err = ws.check(); err != nil {
		return res, err
	}
	return res, nil
}

// prefixEnd is the range end of every key with prefix p.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

func printFanout(w io.Writer, runs []*extraRun[*fanoutResult], ec extraConfig) {
	fmt.Fprintf(w, "%d watchers of one prefix on %d connections (one Watch stream each), %d sequential puts of %d-byte values under it; every event to every watcher (%d events). Server CPU from /proc/PID/stat, from the first put until the last event arrived. Best of the rounds per figure; delivered and misordered: worst round.\n\n",
		ec.fanWatchers, ec.fanConns, ec.fanPuts, ec.valueSize, int64(ec.fanWatchers)*int64(ec.fanPuts))
	fmt.Fprintln(w, "| target | puts/s | last event after | events delivered | misordered | server CPU | server CPU per event |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	rate := func(r *fanoutResult) float64 { return r.putRate() }
	deliver := func(r *fanoutResult) float64 { return r.deliverTime.Seconds() }
	cpu := func(r *fanoutResult) float64 { return r.serverCPU.Seconds() }
	perEvent := func(r *fanoutResult) float64 { return r.cpuPerEvent().Seconds() }
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		delivered := fewestOf(r.rounds, func(x *fanoutResult) int64 { return x.delivered })
		fmt.Fprintf(w, "| %s | %s | %s | %d of %d | %d | %s | %.2f µs |\n", r.t.name,
			fmtRate(bestOf(r.rounds, rate, true)), fmtSec(bestOf(r.rounds, deliver, false)),
			delivered, r.rounds[0].want, worstOf(r.rounds, func(x *fanoutResult) int64 { return x.misordered }),
			fmtSec(bestOf(r.rounds, cpu, false)), bestOf(r.rounds, perEvent, false)*1e6)
	}
	printNotes(w, runs)
	printRatios(w, runs, []ratioCol[*fanoutResult]{
		{"puts/s", rate, true},
		{"last event after", deliver, false},
		{"server CPU per event", perEvent, false},
	})
}
