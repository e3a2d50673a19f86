package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The big-delete workload: one DeleteRange of many keys while other
// clients write and read other keys, and a watcher of the deleted prefix
// counts the delete events.

const (
	bigDeletePrefix = "/registry/bench-bigdelete/"
	otherPrefix     = "/registry/bench-other/"
)

type bigDeleteResult struct {
	delTime             time.Duration
	deleted, events     int64
	baseWrite, write    latencies     // the writers before and during the delete
	read                latencies     // the readers during the delete
	rssBefore, rssAfter int64         // right before the delete; 10 s after it
	rssPeak             int64         // from right before the delete to the last event delivered
	failed              int64         // writers' and readers' requests that failed (timeouts: -req-timeout)
	timedOut            bool          // the server answered the delete "request timed out" (etcd)
	lastEvent           time.Duration // from the delete's answer until the watcher had every event (polled every 2 ms); 0 if it never had
}

// waitGone waits until no key is left under prefix.
func waitGone(ctx context.Context, c *clientv3.Client, prefix string, deadline time.Time) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := c.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		switch {
		case err == nil && r.Count == 0:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("keys still under %s at the deadline (%v)", prefix, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// latencies are the requests of one window.
type latencies struct {
	n             int
	p50, p99, max time.Duration
}

// timedOp is one background request: when it started, how long it took.
type timedOp struct {
	start time.Time
	took  time.Duration
}

// window is the latencies of the ops that overlapped [from, to], or with
// within those that ran inside it.
func window(ops []timedOp, from, to time.Time, within bool) latencies {
	var lat []time.Duration
	for _, o := range ops {
		end := o.start.Add(o.took)
		if within && !o.start.Before(from) && !end.After(to) || !within && o.start.Before(to) && end.After(from) {
			lat = append(lat, o.took)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	l := latencies{n: len(lat), p50: pct(lat, 0.5), p99: pct(lat, 0.99)}
	if len(lat) > 0 {
		l.max = lat[len(lat)-1]
	}
	return l
}

// background runs writers and readers of other keys until stop is closed
// (or maxDur has passed), each sequential, and returns their requests.
func background(ctx context.Context, conns []*clientv3.Client, clients int, val string, reqTimeout, maxDur time.Duration, stop <-chan struct{}) (writes, reads []timedOp, errs int64) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var nerr atomic.Int64
	deadline := time.Now().Add(maxDur)
	for w := 0; w < 2*clients; w++ {
		wg.Add(1)
		go func(w int, c *clientv3.Client) {
			defer wg.Done()
			var ops []timedOp
		loop:
			for i := 0; time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					break loop
				default:
				}
				key := fmt.Sprintf("%sw%02d-k%03d", otherPrefix, w%clients, i%100)
				rctx, cancel := context.WithTimeout(ctx, reqTimeout)
				t0 := time.Now()
				var err error
				if w < clients {
					_, err = c.Put(rctx, key, val)
				} else {
					_, err = c.Get(rctx, key)
				}
				took := time.Since(t0)
				cancel()
				if err != nil {
					nerr.Add(1)
					if ctx.Err() != nil {
						break loop
					}
					continue
				}
				ops = append(ops, timedOp{t0, took})
			}
			mu.Lock()
			if w < clients {
				writes = append(writes, ops...)
			} else {
				reads = append(reads, ops...)
			}
			mu.Unlock()
		}(w, conns[w%len(conns)])
	}
	wg.Wait()
	return writes, reads, nerr.Load()
}

func runBigDelete(ctx context.Context, srv *server, ec extraConfig) (*bigDeleteResult, error) {
	conns, err := dialConns(srv.endpoint, 16)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	val := strings.Repeat("v", ec.valueSize)
	t0 := time.Now()
	if err := loadKeys(ctx, conns, ec.delKeys, func(i int) string { return fmt.Sprintf("%sk%07d", bigDeletePrefix, i) }, val, ec.reqTimeout); err != nil {
		return nil, err
	}
	logf("    loaded %d keys in %v", ec.delKeys, time.Since(t0).Round(time.Second))

	// A watcher of the prefix, as kube-apiserver's watch cache would be.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	ws, err := openFanoutStream(wctx, strings.TrimPrefix(srv.endpoint, "http://"), bigDeletePrefix, 1, false)
	if err != nil {
		return nil, err
	}
	defer ws.conn.Close()
	var events atomic.Int64
	go ws.receive(&events)
	if err := ws.waitCreated(time.Now().Add(time.Minute)); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}

	stop := make(chan struct{})
	type bg struct {
		writes, reads []timedOp
		errs          int64
	}
	done := make(chan bg, 1)
	go func() {
		w, r, e := background(ctx, conns, ec.delClients, val, ec.reqTimeout, 15*time.Minute, stop)
		done <- bg{w, r, e}
	}()
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			<-done
		}
	}()
	baseFrom := time.Now()
	time.Sleep(3 * time.Second)

	res := &bigDeleteResult{}
	before, err := readMemory(srv.pid)
	if err != nil {
		return nil, err
	}
	res.rssBefore = before.rss
	if err := resetPeak(srv.pid); err != nil {
		return nil, fmt.Errorf("reset the peak RSS: %w", err)
	}
	delFrom := time.Now()
	// When the watcher has every event, timed apart from the wait below
	// (which starts a second after the answer); the zero time if it never
	// had them by the end of that wait.
	allEvents := make(chan time.Time, 1)
	quitPoll := make(chan struct{})
	go func() {
		for events.Load() < int64(ec.delKeys) {
			select {
			case <-quitPoll:
				allEvents <- time.Time{}
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
		allEvents <- time.Now()
	}()
	defer func() {
		select {
		case <-quitPoll:
		default:
			close(quitPoll)
		}
	}()
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Minute)
	dresp, err := conns[0].Delete(dctx, bigDeletePrefix, clientv3.WithPrefix())
	dcancel()
	if err == nil {
		res.deleted = dresp.Deleted
	} else if strings.Contains(err.Error(), "request timed out") {
		// etcd's answer when applying takes longer than it waits; the
		// delete is in its log and applies: time it until the keys are gone.
		res.timedOut = true
		if err = waitGone(ctx, conns[0], bigDeletePrefix, delFrom.Add(10*time.Minute)); err == nil {
			res.deleted = int64(ec.delKeys)
		}
	}
	delTo := time.Now()
	if err != nil {
		return nil, fmt.Errorf("delete: %w", err)
	}
	res.delTime = delTo.Sub(delFrom)
	time.Sleep(time.Second)
	close(stop)
	b := <-done
	stopped = true
	res.baseWrite = window(b.writes, baseFrom.Add(time.Second), delFrom, true)
	res.write = window(b.writes, delFrom, delTo, false)
	res.read = window(b.reads, delFrom, delTo, false)
	res.failed = b.errs

	end := time.Now().Add(2 * time.Minute)
	for events.Load() < int64(ec.delKeys) && time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	res.events = events.Load()
	close(quitPoll)
	if at := <-allEvents; !at.IsZero() {
		res.lastEvent = at.Sub(delTo)
	}
	peak, err := readMemory(srv.pid)
	if err != nil {
		return nil, err
	}
	res.rssPeak = peak.hwm
	time.Sleep(time.Until(delTo.Add(10 * time.Second)))
	after, err := readMemory(srv.pid)
	if err != nil {
		return nil, err
	}
	res.rssAfter = after.rss
	// Each round's, since the table shows the best: memory that comes
	// back in one round and not in another shows here.
	last := fmt.Sprintf("last event %v after it", res.lastEvent.Round(time.Millisecond))
	if res.events < int64(ec.delKeys) {
		last = fmt.Sprintf("%d of %d events", res.events, ec.delKeys)
	}
	logf("    delete %v, writes during p99 %v, %s, RSS %s before, %s peak, %s 10 s after",
		res.delTime.Round(time.Millisecond), res.write.p99.Round(time.Millisecond), last, fmtMB(res.rssBefore), fmtMB(res.rssPeak), fmtMB(res.rssAfter))
	if e, _ := ws.err.Load().(string); e != "" && wctx.Err() == nil {
		return res, fmt.Errorf("watch: %s", e)
	}
	return res, nil
}

func printBigDelete(w io.Writer, runs []*extraRun[*bigDeleteResult], ec extraConfig) {
	fmt.Fprintf(w, "One DeleteRange of %d keys (%d-byte values) while %d writers and %d readers, each sequential, use other keys, and a watcher of the prefix counts the delete events. Writers and readers \"during\" are the requests that overlapped the delete (\"before\": those in the 2 s before it); a request fails after 30 s. A delete etcd answers \"request timed out\" still applies: its time is then until the keys are gone. RSS from /proc/PID/status: right before the delete, the peak from then until the last event arrived (VmHWM, reset before the delete), and 10 s after the delete. Best of the rounds per figure; deleted and events: worst round.\n\n",
		ec.delKeys, ec.valueSize, ec.delClients, ec.delClients)
	fmt.Fprintln(w, "| target | delete took | deleted | events | writes before p99 | writes during: n, p50 / p99 / max | reads during: n, p99 / max | failed requests | RSS before | RSS peak | RSS after 10 s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	took := func(r *bigDeleteResult) float64 { return r.delTime.Seconds() }
	wp99 := func(r *bigDeleteResult) float64 { return r.write.p99.Seconds() }
	wmax := func(r *bigDeleteResult) float64 { return r.write.max.Seconds() }
	rp99 := func(r *bigDeleteResult) float64 { return r.read.p99.Seconds() }
	peak := func(r *bigDeleteResult) float64 { return float64(r.rssPeak) }
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		// The round with the faster delete, for the figures that belong together.
		b := r.rounds[0]
		for _, x := range r.rounds[1:] {
			if x.delTime < b.delTime {
				b = x
			}
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %d, %s / %s / %s | %d, %s / %s | %d | %s | %s | %s |\n", r.t.name,
			fmtSec(took(b)), fewestOf(r.rounds, func(x *bigDeleteResult) int64 { return x.deleted }),
			fewestOf(r.rounds, func(x *bigDeleteResult) int64 { return x.events }),
			fmtSec(b.baseWrite.p99.Seconds()),
			b.write.n, fmtSec(b.write.p50.Seconds()), fmtSec(b.write.p99.Seconds()), fmtSec(b.write.max.Seconds()),
			b.read.n, fmtSec(b.read.p99.Seconds()), fmtSec(b.read.max.Seconds()), b.failed,
			fmtMB(b.rssBefore), fmtMB(b.rssPeak), fmtMB(b.rssAfter))
	}
	fmt.Fprintln(w, "\nRows show the round with the faster delete; the ratios take each figure's better round.")
	for _, r := range runs {
		for i, x := range r.rounds {
			if x.timedOut {
				fmt.Fprintf(w, "- %s, round %d: the delete was answered \"request timed out\"; its time is until the keys were gone\n", r.t.name, i+1)
			}
		}
	}
	printNotes(w, runs)
	printRatios(w, runs, []ratioCol[*bigDeleteResult]{
		{"delete took", took, false},
		{"writes during p99", wp99, false},
		{"writes during max", wmax, false},
		{"reads during p99", rp99, false},
		{"RSS peak", peak, false},
	})
}
