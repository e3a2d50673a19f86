package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The replication cost (issue 54): the steady workload's updates (see
// steady.go: kube-apiserver's GuaranteedUpdate on an open-loop schedule) at
// -replicate-rate on QuantyKube/SQLite, the same run without replication,
// with `--replicate file://...` and, when SeaweedFS is at hand, with
// `--replicate s3://...` to a local `weed server -s3`: each variant on a
// fresh store, in the rounds' alternating order. The target:
// replication adds at most 10% server CPU and nothing measurable to the
// updates' p99. Every variant serves /metrics, so that the listener costs
// each alike; the replicator's own counters there give the objects, bytes
// and lag.

// replVariant is one way of running the server.
type replVariant struct {
	name string
	// url is --replicate's value, given a fresh directory; nil: none.
	url func(dir string) (string, error)
}

// replValues is how many random values the updates go round: at 2 KiB,
// 8 MiB, far more than gzip's 32 KiB window.
const replValues = 4096

// replPhase is one variant's measured window in one round.
type replPhase struct {
	variant string
	steady  steadyPhase
	// objects and bytes are what the replicator PUT over the window.
	objects, bytes float64
	// lagRevs and lagSecs are its lag when the window ended; errors its
	// failed intervals over the window.
	lagRevs, lagSecs, errors float64
}

func (p *replPhase) rate() float64 {
	return float64(p.steady.updates) / p.steady.window.Seconds()
}

func (p *replPhase) cores() float64 {
	return p.steady.cpu.Seconds() / p.steady.window.Seconds()
}

// scrapeReplicate reads the quantykube_replicate_* samples from /metrics,
// the objects of every kind summed.
func scrapeReplicate(ctx context.Context, addr string) (map[string]float64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "quantykube_replicate_") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", req.URL, line, err)
		}
		m[name] += v
	}
	return m, sc.Err()
}

// runReplicatePhase runs one variant on a fresh store under dir, with
// sc.extra (-quantykube-flags) among serve's flags; with
// sc.pprof (-steady-pprof) a CPU profile of its window goes into
// sc.pprofDir.
func runReplicatePhase(ctx context.Context, bin, dir string, v replVariant, sc steadyConfig, rate, round int, reqTimeout time.Duration) (*replPhase, error) {
	os.RemoveAll(dir)
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"--metrics-listen-address", addr}, sc.extra...)
	if v.url != nil {
		u, err := v.url(dir)
		if err != nil {
			return nil, err
		}
		args = append(args, "--replicate", u)
	}
	if sc.pprof != "" {
		args = append(args, "--pprof-address", sc.pprof)
	}
	t := quantykubeTarget("quantykube", bin, nil, args)
	srv, err := launch(ctx, t, store, "")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
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
	// Each update's value is one of replValues random ones, so that
	// gzip finds in a segment what it would in a cluster's objects at
	// worst: nothing repeated within its window.
	pool := make([]string, replValues)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = randomValue(r, sc.valueSize)
	}
	value := func(i int) string { return steadyValue(pool[i%len(pool)], i) }
	p := &replPhase{variant: v.name, steady: steadyPhase{rate: rate, load: loadAvg()}}
	sched := schedule{start: time.Now(), rate: rate}
	warm := sched.count(sc.warmup)
	var discard steadyPhase
	runPaced(ctx, c, keys, sched, 0, warm, value, reqTimeout, &discard)
	if err := resetPeak(srv.pid); err != nil {
		return nil, err
	}
	m0, err := scrapeReplicate(ctx, addr)
	if err != nil {
		return nil, err
	}
	cpu0, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	h0, _ := cpuTime(os.Getpid())
	t0 := time.Now()
	var prof chan error
	if sc.pprof != "" {
		prof = make(chan error, 1)
		path := filepath.Join(sc.pprofDir, fmt.Sprintf("replicate-%s-r%d.pprof", strings.Trim(strings.Fields(v.name)[0], ":/"), round))
		go func() { prof <- fetchProfile(ctx, sc.pprof, sc.window, path) }()
	}
	runPaced(ctx, c, keys, schedule{start: t0, rate: rate}, warm, sched.count(sc.window), value, reqTimeout, &p.steady)
	p.steady.window = time.Since(t0)
	cpu1, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	h1, _ := cpuTime(os.Getpid())
	p.steady.cpu, p.steady.harness = cpu1-cpu0, h1-h0
	m1, err := scrapeReplicate(ctx, addr)
	if err != nil {
		return nil, err
	}
	if p.steady.mem, err = readMemory(srv.pid); err != nil {
		return nil, err
	}
	if prof != nil {
		if err := <-prof; err != nil {
			logf("replicate: profile: %v", err)
		}
	}
	p.objects = m1["quantykube_replicate_objects_total"] - m0["quantykube_replicate_objects_total"]
	p.bytes = m1["quantykube_replicate_bytes_total"] - m0["quantykube_replicate_bytes_total"]
	p.errors = m1["quantykube_replicate_errors_total"] - m0["quantykube_replicate_errors_total"]
	p.lagRevs, p.lagSecs = m1["quantykube_replicate_lag_revisions"], m1["quantykube_replicate_lag_seconds"]
	if v.url != nil && p.objects == 0 {
		return nil, fmt.Errorf("replicate %s: no object PUT in %v; log: %s", v.name, p.steady.window, tail(filepath.Join(store, "server.log")))
	}
	if p.steady.errs > 0 {
		return nil, fmt.Errorf("replicate %s: %d updates failed or dropped", v.name, p.steady.errs)
	}
	return p, nil
}

// runReplicateCost runs every variant rounds times, in the rounds'
// alternating order, and prints them side by side.
func runReplicateCost(ctx context.Context, bin, workDir string, variants []replVariant, sc steadyConfig, rate, rounds int, reqTimeout time.Duration) error {
	byRound := make([][]*replPhase, rounds)
	for r := 1; r <= rounds; r++ {
		byRound[r-1] = make([]*replPhase, len(variants))
		for _, i := range roundOrder(len(variants), r) {
			v := variants[i]
			p, err := runReplicatePhase(ctx, bin, filepath.Join(workDir, "replicate-"+strconv.Itoa(i)), v, sc, rate, r, reqTimeout)
			if err != nil {
				return err
			}
			logf("replicate: round %d: %s: %.0f updates/s, %.3f cores, p50 %v p99 %v, %.0f objects, %s, lag %.0f revisions %.1f s (load %s)",
				r, v.name, p.rate(), p.cores(), pct(p.steady.lat, 0.5).Round(time.Microsecond), pct(p.steady.lat, 0.99).Round(time.Microsecond),
				p.objects, fmtMB1(int64(p.bytes)), p.lagRevs, p.lagSecs, p.steady.load)
			byRound[r-1][i] = p
		}
	}
	printReplicateCost(variants, byRound, sc, rate)
	return nil
}

func printReplicateCost(variants []replVariant, byRound [][]*replPhase, sc steadyConfig, rate int) {
	fmt.Printf("\n### replicate: the cost of `serve --replicate` (QuantyKube/SQLite), %d updates/s of %d existing keys of %d bytes, %v warm-up and %v measured, each variant on a fresh store, %d rounds in alternating order\n\n",
		rate, sc.keys, sc.valueSize, sc.warmup, sc.window, len(byRound))
	fmt.Println("| round (position) | replication | updates/s | server CPU (cores) | per update | p50 | p99 | RSS (peak) | objects PUT | bytes shipped | errors | lag at the end | load |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for r, ps := range byRound {
		for pos, i := range roundOrder(len(variants), r+1) {
			p := ps[i]
			fmt.Printf("| %d (%d) | %s | %.0f | %.3f | %.0f µs | %s | %s | %s (%s) | %.0f | %s | %.0f | %.0f revisions, %.1f s | %s |\n",
				r+1, pos+1, p.variant, p.rate(), p.cores(), perUpdate(p.steady.cpu, p.steady.updates),
				fmtSec(pct(p.steady.lat, 0.5).Seconds()), fmtSec(pct(p.steady.lat, 0.99).Seconds()),
				fmtMB(p.steady.mem.rss), fmtMB(p.steady.mem.hwm), p.objects, fmtMB1(int64(p.bytes)), p.errors, p.lagRevs, p.lagSecs, p.steady.load)
		}
	}
	fmt.Println("\n| against no replication (issue 54: CPU at most 1.10x, p99 unchanged) | server CPU per update, each round | median | p99, each round | median |")
	fmt.Println("|---|---|---:|---|---:|")
	for i := 1; i < len(variants); i++ {
		var cpu, p99 []float64
		for _, ps := range byRound {
			a, b := ps[i], ps[0]
			if a.steady.updates == 0 || b.steady.updates == 0 {
				continue
			}
			cpu = append(cpu, (a.steady.cpu.Seconds()/float64(a.steady.updates))/(b.steady.cpu.Seconds()/float64(b.steady.updates)))
			if q := pct(b.steady.lat, 0.99); q > 0 {
				p99 = append(p99, float64(pct(a.steady.lat, 0.99))/float64(q))
			}
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", variants[i].name, joinRatios(cpu), fmtMedian(cpu), joinRatios(p99), fmtMedian(p99))
	}
}

func joinRatios(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2fx", x)
	}
	return strings.Join(s, ", ")
}

// replVariants is no replication, file://, and s3:// when weedURL (a
// running SeaweedFS's URL of a prefix) is given.
func replVariants(weedURL func(prefix string) string) []replVariant {
	vs := []replVariant{
		{name: "none"},
		{name: "file://", url: func(dir string) (string, error) {
			b := filepath.Join(dir, "bucket")
			return "file://" + b, os.MkdirAll(b, 0o755)
		}},
	}
	if weedURL != nil {
		n := 0
		vs = append(vs, replVariant{name: "s3:// (SeaweedFS)", url: func(string) (string, error) {
			n++ // each store its own prefix: a prefix holds one lineage
			return weedURL(fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), n)), nil
		}})
	}
	return slices.Clip(vs)
}
