package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// The steady workload (issue 40): what one update costs a server at the
// rates a cluster runs at all day, not flat out. Updates of existing keys
// are issued on an open-loop schedule, R per second, each by its own
// goroutine when it is due, so that how many are in flight is what the
// server's latency makes it, as kube-apiserver sends one Txn per request.
// Each update is kube-apiserver's GuaranteedUpdate: a Txn that puts the
// key if its mod_revision is still the one last seen, else gets it. After
// a warm-up, a window is measured: the server's CPU (user + system from
// /proc/PID/stat) per update, its RSS, and the updates' latency from when
// each was due (so a schedule that fell behind shows in it). Before each
// window the harness times fdatasync of a 4 KiB overwrite in the data
// directory's file system, the floor every durable commit stands on.
// With -steady-watch each rate runs a second time with a watch on the
// prefix (prev_kv, progress notify), as kube-apiserver's watch cache.

const steadyPrefix = "/registry/bench-steady/"

// steadyInFlight bounds the updates in flight; past it, a due update is
// dropped and counted (the server has fallen behind by thousands).
const steadyInFlight = 4096

// steadyPhase is one rate's measured window on one server.
type steadyPhase struct {
	rate    int
	watched bool
	sync    syncStats
	window  time.Duration
	updates int             // answered in the window
	errs    int             // failed, or dropped at steadyInFlight
	stale   int             // Txns whose compare failed (a concurrent update of the key)
	lat     []time.Duration // sorted, from each update's due time
	cpu     time.Duration   // the server's, over the window
	harness time.Duration   // the harness's, over the window
	mem     memory          // peak over the window, and RSS at its end
	events  int64           // delivered to the watch, with -steady-watch
	load    string
}

func (p *steadyPhase) cpuPerUpdate() time.Duration {
	if p.updates == 0 {
		return 0
	}
	return p.cpu / time.Duration(p.updates)
}

func (p *steadyPhase) String() string {
	w := ""
	if p.watched {
		w = " watched"
	}
	return fmt.Sprintf("%d/s%s: %d updates, %.0f µs server CPU each, p50 %v p99 %v, RSS %s, sync p50 %v p99 %v",
		p.rate, w, p.updates, p.cpuPerUpdate().Seconds()*1e6, pct(p.lat, 0.5).Round(time.Microsecond),
		pct(p.lat, 0.99).Round(time.Microsecond), fmtMB(p.mem.rss), p.sync.p50.Round(time.Microsecond), p.sync.p99.Round(time.Microsecond))
}

// steadyResult is one round of one target: each rate, then each rate
// watched.
type steadyResult struct {
	round  int
	phases []*steadyPhase
}

func (r *steadyResult) String() string {
	var s []string
	for _, p := range r.phases {
		s = append(s, p.String())
	}
	return strings.Join(s, "; ")
}

// schedule is an open-loop schedule: update i is due i/rate seconds after
// the start, whatever became of the ones before.
type schedule struct {
	start time.Time
	rate  int
}

func (s schedule) due(i int) time.Time {
	return s.start.Add(time.Duration(int64(i) * int64(time.Second) / int64(s.rate)))
}

// count is how many updates fall due in d.
func (s schedule) count(d time.Duration) int {
	return int(int64(d) * int64(s.rate) / int64(time.Second))
}

// syncStats is fdatasync's latency in a file system.
type syncStats struct {
	n        int
	p50, p99 time.Duration
}

// syncProbes bounds the probe: at most this many syncs, in at most
// syncProbeTime.
const (
	syncProbes    = 200
	syncProbeTime = 5 * time.Second
)

// probeSync times fdatasync of a 4 KiB overwrite in a file preallocated in
// dir: the data's sync alone, as a WAL that reuses its file pays it.
func probeSync(dir string) (syncStats, error) {
	path := filepath.Join(dir, "sync-probe")
	f, err := os.Create(path)
	if err != nil {
		return syncStats{}, err
	}
	defer os.Remove(path)
	defer f.Close()
	const size = 1 << 20
	page := make([]byte, 4096)
	for off := int64(0); off < size; off += int64(len(page)) {
		if _, err := f.WriteAt(page, off); err != nil {
			return syncStats{}, err
		}
	}
	if err := f.Sync(); err != nil {
		return syncStats{}, err
	}
	var lat []time.Duration
	deadline := time.Now().Add(syncProbeTime)
	for i := 0; i < syncProbes && time.Now().Before(deadline); i++ {
		page[0] = byte(i)
		t0 := time.Now()
		if _, err := f.WriteAt(page, int64(i*len(page))%size); err != nil {
			return syncStats{}, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return syncStats{}, fmt.Errorf("fdatasync: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	return summarizeSync(lat), nil
}

func summarizeSync(lat []time.Duration) syncStats {
	slices.Sort(lat)
	return syncStats{n: len(lat), p50: pct(lat, 0.5), p99: pct(lat, 0.99)}
}

// steadyKeys is the store the updates run on: each key's mod_revision as
// last seen, which the next update of it compares.
type steadyKeys struct {
	names []string
	rev   []atomic.Int64
}

func steadyKey(i int) string { return fmt.Sprintf("%sk%05d", steadyPrefix, i) }

// loadSteadyKeys creates n keys of val and reads back their revisions.
func loadSteadyKeys(ctx context.Context, c *clientv3.Client, n int, val string, reqTimeout time.Duration) (*steadyKeys, error) {
	if err := loadKeys(ctx, []*clientv3.Client{c}, n, steadyKey, val, reqTimeout); err != nil {
		return nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, reqTimeout)
	defer cancel()
	resp, err := c.Get(gctx, steadyPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) != n {
		return nil, fmt.Errorf("steady: %d keys loaded, want %d", len(resp.Kvs), n)
	}
	k := &steadyKeys{names: make([]string, n), rev: make([]atomic.Int64, n)}
	for i, kv := range resp.Kvs { // in key order, as steadyKey numbers them
		k.names[i] = string(kv.Key)
		k.rev[i].Store(kv.ModRevision)
	}
	return k, nil
}

// update is kube-apiserver's GuaranteedUpdate of key i: put if unchanged
// since last seen, else read it (and remember its revision).
func (k *steadyKeys) update(ctx context.Context, c *clientv3.Client, i int, val string) (stale bool, err error) {
	key := k.names[i]
	rev := k.rev[i].Load()
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		k.rev[i].CompareAndSwap(rev, resp.Header.Revision)
		return false, nil
	}
	if rs := resp.Responses; len(rs) == 1 && len(rs[0].GetResponseRange().Kvs) == 1 {
		k.rev[i].Store(rs[0].GetResponseRange().Kvs[0].ModRevision)
	}
	return true, nil
}

// steadyValue is val with the update's number at its front, so that no
// two revisions of a key hold the same bytes.
func steadyValue(val string, i int) string {
	n := fmt.Sprintf("%012d", i)
	if len(val) <= len(n) {
		return n
	}
	return n + val[len(n):]
}

// runPaced issues the n updates of sched, each by its own goroutine when
// it is due, and waits for them (each is bounded by reqTimeout). Update j
// is the run's update base+j: its key and value(base+j) follow from that
// number.
func runPaced(ctx context.Context, c *clientv3.Client, keys *steadyKeys, sched schedule, base, n int, value func(int) string, reqTimeout time.Duration, ph *steadyPhase) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var inFlight atomic.Int64
	for j := 0; j < n && ctx.Err() == nil; j++ {
		due, i := sched.due(j), base+j
		if d := time.Until(due); d > 0 {
			if sleepCtx(ctx, d) != nil {
				break
			}
		}
		if inFlight.Load() >= steadyInFlight {
			mu.Lock()
			ph.errs++
			mu.Unlock()
			continue
		}
		inFlight.Add(1)
		wg.Go(func() {
			defer inFlight.Add(-1)
			rctx, cancel := context.WithTimeout(ctx, reqTimeout)
			stale, err := keys.update(rctx, c, i%len(keys.names), value(i))
			cancel()
			lat := time.Since(due)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				ph.errs++
			case stale:
				ph.stale++
				ph.lat = append(ph.lat, lat)
			default:
				ph.updates++
				ph.lat = append(ph.lat, lat)
			}
		})
	}
	wg.Wait()
	slices.Sort(ph.lat)
}

// steadyConfig sizes the workload.
type steadyConfig struct {
	rates     []int
	keys      int
	valueSize int
	warmup    time.Duration
	window    time.Duration
	watch     bool
	// extra are more serve flags, for -replicate (-quantykube-flags).
	extra []string
	// pprof, when set, is the QuantyKube targets' --pprof-address: a CPU
	// profile of each window is written into pprofDir.
	pprof, pprofDir string
}

// runSteady runs every rate (then every rate watched) on one server.
func runSteady(ctx context.Context, t target, srv *server, fr *fresh, round int, sc steadyConfig, reqTimeout time.Duration) (*steadyResult, error) {
	conns, err := dialConns(srv.endpoint, 1)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	c := conns[0]
	val := strings.Repeat("v", sc.valueSize)
	keys, err := loadSteadyKeys(ctx, c, sc.keys, val, reqTimeout)
	if err != nil {
		return nil, err
	}
	value := func(i int) string { return steadyValue(val, i) }
	res := &steadyResult{round: round}
	next := 0 // the updates' numbers run on over the phases
	for _, watched := range []bool{false, true} {
		if watched && !sc.watch {
			break
		}
		var events atomic.Int64
		wctx, wcancel := context.WithCancel(ctx)
		if watched {
			wch := c.Watch(wctx, steadyPrefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
			select {
			case r, ok := <-wch:
				if !ok || !r.Created {
					wcancel()
					return nil, fmt.Errorf("steady: watch not created: %v", r.Err())
				}
			case <-time.After(30 * time.Second):
				wcancel()
				return nil, fmt.Errorf("steady: watch not created within 30s")
			}
			go func() {
				for r := range wch {
					events.Add(int64(len(r.Events)))
				}
			}()
		}
		for _, rate := range sc.rates {
			ph := &steadyPhase{rate: rate, watched: watched, load: loadAvg()}
			if ph.sync, err = probeSync(fr.dir); err != nil {
				wcancel()
				return nil, err
			}
			sched := schedule{start: time.Now(), rate: rate}
			warm := sched.count(sc.warmup)
			var discard steadyPhase
			runPaced(ctx, c, keys, sched, next, warm, value, reqTimeout, &discard)
			if err := resetPeak(srv.pid); err != nil {
				wcancel()
				return nil, err
			}
			cpu0, err := cpuTime(srv.pid)
			if err != nil {
				wcancel()
				return nil, err
			}
			h0, _ := cpuTime(os.Getpid())
			e0 := events.Load()
			t0 := time.Now()
			var prof chan error
			if sc.pprof != "" && isQuantyKube(t) {
				prof = make(chan error, 1)
				name := fmt.Sprintf("steady-%d%s-r%d.pprof", rate, map[bool]string{true: "-watched"}[watched], round)
				go func() { prof <- fetchProfile(ctx, sc.pprof, sc.window, filepath.Join(sc.pprofDir, name)) }()
			}
			n := sched.count(sc.window)
			runPaced(ctx, c, keys, schedule{start: t0, rate: rate}, next+warm, n, value, reqTimeout, ph)
			ph.window = time.Since(t0)
			cpu1, err := cpuTime(srv.pid)
			if err != nil {
				wcancel()
				return nil, err
			}
			h1, _ := cpuTime(os.Getpid())
			ph.cpu, ph.harness = cpu1-cpu0, h1-h0
			ph.events = events.Load() - e0
			if ph.mem, err = readMemory(srv.pid); err != nil {
				wcancel()
				return nil, err
			}
			if prof != nil {
				if err := <-prof; err != nil {
					logf("steady: profile: %v", err)
				}
			}
			next += warm + n
			if ph.errs > 0 {
				logf("%s: steady %d/s: %d updates failed or dropped", t.name, rate, ph.errs)
			}
			res.phases = append(res.phases, ph)
		}
		wcancel()
	}
	return res, ctx.Err()
}

// fetchProfile writes a CPU profile of the next d from a pprof endpoint.
func fetchProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	secs := max(int(d.Seconds()), 1)
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: d + time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printSteady prints every round's phases, then QuantyKube's CPU per
// update over etcd's, round by round: each round runs the targets in the
// other order (roundOrder), so the pairs show both.
func printSteady(w io.Writer, runs []*extraRun[*steadyResult], sc steadyConfig) {
	watch := ""
	if sc.watch {
		watch = "; then each rate again with a watch on the prefix (prev_kv, progress notify), as kube-apiserver's watch cache"
	}
	fmt.Fprintf(w, "Updates of %d existing keys of %d bytes, each kube-apiserver's GuaranteedUpdate (a Txn: put if mod_revision is unchanged, else get), issued on an open-loop schedule, each by its own goroutine when due, on one connection; %v warm-up, then %v measured per rate%s. Server CPU (user + system, /proc/PID/stat) and the harness's over the window, per update answered; latency from each update's due time; RSS at the window's end and its peak (VmHWM reset at its start). Sync: fdatasync of a 4 KiB overwrite in the data directory's file system just before the phase (p50 / p99 of up to %d). One row per round: the rounds alternate the targets' order.\n\n",
		sc.keys, sc.valueSize, sc.warmup, sc.window, watch, syncProbes)
	fmt.Fprintln(w, "| round (position) | target | rate /s | watch | updates | stale | failed or dropped | server CPU per update | harness CPU per update | p50 | p99 | RSS (peak) | sync p50 / p99 | load |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for r := 1; r <= maxSteadyRound(runs); r++ {
		for pos, i := range roundOrder(len(runs), r) {
			res := steadyRound(runs[i], r)
			if res == nil {
				continue
			}
			for _, p := range res.phases {
				fmt.Fprintf(w, "| %d (%d) | %s | %d | %s | %d | %d | %d | %.0f µs | %.0f µs | %s | %s | %s (%s) | %s / %s | %s |\n",
					r, pos+1, runs[i].t.name, p.rate, map[bool]string{true: "yes", false: "no"}[p.watched], p.updates, p.stale, p.errs,
					perUpdate(p.cpu, p.updates), perUpdate(p.harness, p.updates), fmtSec(pct(p.lat, 0.5).Seconds()), fmtSec(pct(p.lat, 0.99).Seconds()),
					fmtMB(p.mem.rss), fmtMB(p.mem.hwm), fmtSec(p.sync.p50.Seconds()), fmtSec(p.sync.p99.Seconds()), p.load)
			}
		}
	}
	printNotes(w, runs)
	var etcd *extraRun[*steadyResult]
	for _, r := range runs {
		if r.t.name == "etcd" {
			etcd = r
		}
	}
	if etcd == nil {
		return
	}
	fmt.Fprintln(w, "\n| QuantyKube's server CPU per update ÷ etcd's (issue 40's target: at most 0.70) | rate /s | watch | each round | median |")
	fmt.Fprintln(w, "|---|---:|---|---|---:|")
	for _, q := range runs {
		if !strings.HasPrefix(q.t.name, "quantykube") || len(q.rounds) == 0 {
			continue
		}
		for pi, p := range q.rounds[0].phases {
			var rs []float64
			for _, qr := range q.rounds {
				er := steadyRound(etcd, qr.round)
				if er == nil || pi >= len(qr.phases) || pi >= len(er.phases) || er.phases[pi].updates == 0 || qr.phases[pi].updates == 0 {
					continue
				}
				a := qr.phases[pi].cpu.Seconds() / float64(qr.phases[pi].updates)
				b := er.phases[pi].cpu.Seconds() / float64(er.phases[pi].updates)
				if b > 0 {
					rs = append(rs, a/b)
				}
			}
			var each []string
			for _, x := range rs {
				each = append(each, fmt.Sprintf("%.2f", x))
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", q.t.name, p.rate, map[bool]string{true: "yes", false: "no"}[p.watched], strings.Join(each, ", "), fmtMedian(rs))
		}
	}
}

func perUpdate(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return d.Seconds() * 1e6 / float64(n)
}

// steadyRound is run's result of round n, nil if it has none.
func steadyRound(run *extraRun[*steadyResult], n int) *steadyResult {
	for _, x := range run.rounds {
		if x.round == n {
			return x
		}
	}
	return nil
}

func maxSteadyRound(runs []*extraRun[*steadyResult]) int {
	n := 0
	for _, r := range runs {
		for _, x := range r.rounds {
			n = max(n, x.round)
		}
	}
	return n
}
