package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The watchers workload: many clients, each with one watch (prev_kv, as
// kube-apiserver's watch cache asks) on one of four prefixes, while 64
// clients update the keys under them, as agents that each watch the store
// do (Cilium's, Calico's) while it is written. The fan-out workload has
// many watchers on few streams and sequential puts; this one has a stream
// per watcher and the writes as fast as they are answered, so a stream
// that falls behind has a backlog to send, which is where a server's
// memory goes. The watchers count events on the wire without decoding
// them (fanout.go's frameCodec).

const watchersPrefix = "/registry/bench-watchers/"

// watchersPrefixes is how many prefixes the keys and the watches spread over.
const watchersPrefixes = 4

type watchersResult struct {
	puts       opStats
	want       int64 // events the puts owe the watchers
	delivered  int64
	misordered int64
	lastEvent  time.Duration // from the last put answered to the last event received
	serverCPU  time.Duration // from the first put to the last event
	mem        memory        // peak from the first put to the last event, and RSS then
}

func (r *watchersResult) cpuPerEvent() time.Duration {
	if r.delivered == 0 {
		return 0
	}
	return r.serverCPU / time.Duration(r.delivered)
}

func (r *watchersResult) String() string {
	return fmt.Sprintf("%.0f puts/s, %.2f µs server CPU per event, peak RSS %s, %d missing, %d misordered",
		r.puts.rate(), r.cpuPerEvent().Seconds()*1e6, fmtMB(r.mem.hwm), r.want-r.delivered, r.misordered)
}

// watchersStride spreads consecutive puts over the keys: a prime, so any
// number of keys that is not a multiple of it is covered.
const watchersStride = 7919

// watchersOps bounds the puts; the window (-watchers-time) ends the run
// long before on any machine this runs on.
const watchersOps = 10_000_000

func runWatchers(ctx context.Context, srv *server, ec extraConfig) (*watchersResult, error) {
	prefix := func(p int) string { return fmt.Sprintf("%s%d/", watchersPrefix, p) }
	// Key i (mod the keys) is under prefix i mod watchersPrefixes.
	key := func(i int) string {
		i %= ec.watchersKeys
		return fmt.Sprintf("%sk%06d", prefix(i%watchersPrefixes), i)
	}
	conns, err := dialConns(srv.endpoint, 8)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	val := strings.Repeat("v", ec.valueSize)
	// Every key exists first, so that each put is an update with a prev_kv.
	if err := loadKeys(ctx, conns, ec.watchersKeys, key, val, ec.reqTimeout); err != nil {
		return nil, err
	}

	ws := newWatchSet(ctx, strings.TrimPrefix(srv.endpoint, "http://"))
	defer ws.close()
	watching := make([]int64, watchersPrefixes) // watchers of each prefix
	for i := 0; i < ec.watchersStreams; i++ {
		if err := ws.open(prefix(i%watchersPrefixes), 1, true); err != nil {
			return nil, err
		}
		watching[i%watchersPrefixes]++
	}
	if err := ws.waitCreated(time.Now().Add(2 * time.Minute)); err != nil {
		return nil, err
	}

	res := &watchersResult{}
	if err := resetPeak(srv.pid); err != nil {
		return nil, fmt.Errorf("reset the peak RSS: %w", err)
	}
	cpu0, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	var owed atomic.Int64
	res.puts = drive(ctx, conns, ec.watchersClients, watchersOps, ec.watchersTime, ec.reqTimeout, func(ctx context.Context, c *clientv3.Client, i int) error {
		// Consecutive puts go to keys far apart, under every prefix in turn.
		k := i * watchersStride % ec.watchersKeys
		if _, err := c.Put(ctx, key(k), val); err != nil {
			return err
		}
		owed.Add(watching[k%watchersPrefixes])
		return nil
	})
	lastPut := time.Now()
	res.want = owed.Load()
	for ws.total.Load() < res.want && time.Since(lastPut) < ec.watchersWait && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
	res.lastEvent = time.Since(lastPut)
	cpu1, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	res.serverCPU = cpu1 - cpu0
	if res.mem, err = readMemory(srv.pid); err != nil {
		return nil, err
	}
	res.delivered = ws.total.Load()
	if res.misordered, err = ws.check(); err != nil {
		return res, err
	}
	if res.puts.ops == 0 {
		return nil, fmt.Errorf("watchers: no put succeeded (first error: %q)", res.puts.firstErr)
	}
	return res, nil
}

func watchersPuts(r *watchersResult) float64     { return r.puts.rate() }
func watchersCPU(r *watchersResult) float64      { return r.cpuPerEvent().Seconds() }
func watchersPeak(r *watchersResult) float64     { return float64(r.mem.hwm) }
func watchersLast(r *watchersResult) float64     { return r.lastEvent.Seconds() }
func watchersPutP99(r *watchersResult) float64   { return r.puts.p99().Seconds() }
func watchersMissing(r *watchersResult) int64    { return r.want - r.delivered }
func watchersMisordered(r *watchersResult) int64 { return r.misordered }

func printWatchers(w io.Writer, runs []*extraRun[*watchersResult], ec extraConfig) {
	fmt.Fprintf(w, "%d clients, each with one watch (prev_kv) on one of %d prefixes, while %d clients (8 connections) update %d keys of %d bytes under them for %v; every event to every watcher of its prefix. Server CPU from /proc/PID/stat from the first put until the last event arrived; peak RSS (VmHWM, reset before the first put) and RSS then. Best of the rounds per figure; missing and misordered events: worst round.\n\n",
		ec.watchersStreams, watchersPrefixes, ec.watchersClients, ec.watchersKeys, ec.valueSize, ec.watchersTime)
	fmt.Fprintln(w, "| target | puts/s | put p99 | events delivered | missing | misordered | last event after the last put | server CPU per event | peak RSS | RSS at the end |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %s | %.2f µs | %s | %s |\n", r.t.name,
			fmtRate(bestOf(r.rounds, watchersPuts, true)), fmtSec(bestOf(r.rounds, watchersPutP99, false)),
			fewestOf(r.rounds, func(x *watchersResult) int64 { return x.delivered }),
			worstOf(r.rounds, watchersMissing), worstOf(r.rounds, watchersMisordered),
			fmtSec(bestOf(r.rounds, watchersLast, false)), bestOf(r.rounds, watchersCPU, false)*1e6,
			fmtMB(int64(bestOf(r.rounds, watchersPeak, false))),
			fmtMB(int64(bestOf(r.rounds, func(x *watchersResult) float64 { return float64(x.mem.rss) }, false))))
	}
	printNotes(w, runs)
	printRatios(w, runs, []ratioCol[*watchersResult]{
		{"puts/s", watchersPuts, true},
		{"put p99", watchersPutP99, false},
		{"server CPU per event", watchersCPU, false},
		{"peak RSS", watchersPeak, false},
	})
}
