package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The scale workload (issue 58): a store at a cluster's size, under
// kube-apiserver. -scale-objects ConfigMaps of about -scale-object-size
// bytes, in -scale-namespaces namespaces, are written as kube-apiserver
// stores them (kobjects.go) through the etcd API, by 16 clients, each
// object by kube-apiserver's create Txn (If(mod_revision==0) Then(Put)).
// kube-apiserver is then started on the store and timed to /readyz; it
// fills its watch cache from the store as it starts. A full list follows,
// through kube-apiserver as `kubectl get cm -A --chunk-size=500` asks for
// it, then -scale-rate updates/s for -scale-time, on an open-loop
// schedule, each kube-apiserver's GuaranteedUpdate Txn of one object (a
// new payload, the same size), sent to the store directly while
// kube-apiserver watches it. The store's RSS is sampled every 250 ms
// (rssSampler); each phase's peak is the higher of the samples and of
// VmHWM, reset at the phase's start. One round per target: the load
// alone takes minutes on kine.

// scaleConfig sizes the scale workload.
type scaleConfig struct {
	objects, namespaces, objectSize int
	rate                            int
	steady                          time.Duration
	chunk                           int
	rounds                          int
}

// tenantsConfig sizes the tenants workload (tenants.go).
type tenantsConfig struct {
	stores, objects, objectSize int
	rate                        float64 // updates per second per store
	steady                      time.Duration
}

// scaleFlags registers the scale and tenants flags; the function it
// returns applies -quick to those not set on the command line.
func scaleFlags(sc *scaleConfig, tc *tenantsConfig) func(set map[string]bool, quick bool) {
	flag.IntVar(&sc.objects, "scale-objects", 50_000, "scale: ConfigMaps written before kube-apiserver starts (-quick 5,000)")
	flag.IntVar(&sc.namespaces, "scale-namespaces", 50, "scale: namespaces the ConfigMaps are spread over")
	flag.IntVar(&sc.objectSize, "scale-object-size", 1024, "scale: bytes of each stored ConfigMap (protobuf, data base64 of random bytes)")
	flag.IntVar(&sc.rate, "scale-rate", 50, "scale: updates per second after the full list")
	flag.DurationVar(&sc.steady, "scale-time", 10*time.Minute, "scale: how long the updates run (-quick 1m)")
	flag.IntVar(&sc.chunk, "scale-chunk", 500, "scale: the full list's chunk size (kubectl's --chunk-size)")
	flag.IntVar(&sc.rounds, "scale-rounds", 1, "scale: rounds per target (not -rounds: one takes minutes)")
	flag.IntVar(&tc.stores, "tenants-stores", 30, "tenants: stores (processes) per target, each on its own database of one PostgreSQL")
	flag.IntVar(&tc.objects, "tenants-objects", 1000, "tenants: ConfigMaps per store (-quick 200)")
	flag.IntVar(&tc.objectSize, "tenants-object-size", 1024, "tenants: bytes of each stored ConfigMap")
	flag.Float64Var(&tc.rate, "tenants-rate", 2, "tenants: updates per second per store")
	flag.DurationVar(&tc.steady, "tenants-time", 3*time.Minute, "tenants: how long the updates run (-quick 30s)")
	return func(set map[string]bool, quick bool) {
		if !quick {
			return
		}
		if !set["scale-objects"] {
			sc.objects = 5000
		}
		if !set["scale-time"] {
			sc.steady = time.Minute
		}
		if !set["tenants-objects"] {
			tc.objects = 200
		}
		if !set["tenants-time"] {
			tc.steady = 30 * time.Second
		}
	}
}

func (sc *scaleConfig) check() error {
	if sc.objects < 1 || sc.namespaces < 1 || sc.namespaces > sc.objects || sc.objectSize < 1 || sc.rate < 1 || sc.steady < time.Second || sc.chunk < 1 || sc.rounds < 1 {
		return fmt.Errorf("scale: want objects >= namespaces >= 1, a size, rate, chunk and rounds >= 1 and a time >= 1s")
	}
	return nil
}

// scaleObjects is one store's objects: their keys, and the revision each
// was last written at (what the next update compares).
type scaleObjects struct {
	cms       *configMaps
	ns, names []string // per object
	rev       []atomic.Int64
	version   []atomic.Int64
	liveBytes atomic.Int64 // keys and values of the live objects
}

func newScaleObjects(objects, namespaces, size int, prefix string) (*scaleObjects, error) {
	cms, err := newConfigMaps(size)
	if err != nil {
		return nil, err
	}
	o := &scaleObjects{cms: cms, ns: make([]string, objects), names: make([]string, objects),
		rev: make([]atomic.Int64, objects), version: make([]atomic.Int64, objects)}
	for i := range objects {
		o.ns[i] = fmt.Sprintf("%s-%03d", prefix, i%namespaces)
		o.names[i] = fmt.Sprintf("cm-%06d", i)
	}
	return o, nil
}

// namespaces are the distinct namespaces, in order.
func (o *scaleObjects) namespaces() []string {
	var out []string
	seen := map[string]bool{}
	for _, ns := range o.ns {
		if !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out
}

// create is kube-apiserver's create Txn of key; it returns the revision.
func create(ctx context.Context, c *clientv3.Client, key string, val []byte) (int64, error) {
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("create %s: the key exists", key)
	}
	return resp.Header.Revision, nil
}

// load writes the namespaces, then the objects, by workers clients spread
// over conns.
func (o *scaleObjects) load(ctx context.Context, conns []*clientv3.Client, workers int, reqTimeout time.Duration) error {
	for j, ns := range o.namespaces() {
		val, err := namespaceObject(ns, uint64(1<<40+j))
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, reqTimeout)
		_, err = create(rctx, conns[0], namespaceKey(ns), val)
		cancel()
		if err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		o.liveBytes.Add(int64(len(namespaceKey(ns)) + len(val)))
	}
	st := drive(ctx, conns, workers, len(o.names), time.Hour, reqTimeout, func(ctx context.Context, c *clientv3.Client, i int) error {
		val, err := o.cms.encode(o.ns[i], o.names[i], uint64(i), 0)
		if err != nil {
			return err
		}
		key := configMapKey(o.ns[i], o.names[i])
		rev, err := create(ctx, c, key, val)
		if err != nil {
			return err
		}
		o.rev[i].Store(rev)
		o.liveBytes.Add(int64(len(key) + len(val)))
		return nil
	})
	if st.ops != len(o.names) {
		return fmt.Errorf("load: %d of %d objects written (%d errors, first: %s)", st.ops, len(o.names), st.errs, st.firstErr)
	}
	return nil
}

// update is kube-apiserver's GuaranteedUpdate of object i with a new
// payload of the same size: put if unchanged since last written, else
// read it.
func (o *scaleObjects) update(ctx context.Context, c *clientv3.Client, i int) (stale bool, err error) {
	v := int(o.version[i].Add(1))
	val, err := o.cms.encode(o.ns[i], o.names[i], uint64(i), v)
	if err != nil {
		return false, err
	}
	key := configMapKey(o.ns[i], o.names[i])
	rev := o.rev[i].Load()
	resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(val))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		o.rev[i].CompareAndSwap(rev, resp.Header.Revision)
		return false, nil
	}
	if rs := resp.Responses; len(rs) == 1 && len(rs[0].GetResponseRange().Kvs) == 1 {
		o.rev[i].Store(rs[0].GetResponseRange().Kvs[0].ModRevision)
	}
	return true, nil
}

// pacedStats is an open-loop run's outcome.
type pacedStats struct {
	done, stale, errs int
	firstErr          string
	lat               []time.Duration // sorted, from each update's due time
}

// runOpenLoop calls fn(j) for j < n, each by its own goroutine when it
// falls due (sched), at most inFlight at once (a due call past that is
// dropped and counted an error), and waits for them.
func runOpenLoop(ctx context.Context, sched schedule, n, inFlight int, reqTimeout time.Duration, fn func(ctx context.Context, j int) (stale bool, err error)) *pacedStats {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var busy atomic.Int64
	st := &pacedStats{}
	fail := func(err error) {
		st.errs++
		if st.firstErr == "" {
			st.firstErr = err.Error()
		}
	}
	for j := 0; j < n && ctx.Err() == nil; j++ {
		due := sched.due(j)
		if d := time.Until(due); d > 0 && sleepCtx(ctx, d) != nil {
			break
		}
		if busy.Load() >= int64(inFlight) {
			mu.Lock()
			fail(fmt.Errorf("%d requests in flight: dropped", inFlight))
			mu.Unlock()
			continue
		}
		busy.Add(1)
		wg.Go(func() {
			defer busy.Add(-1)
			rctx, cancel := context.WithTimeout(ctx, reqTimeout)
			stale, err := fn(rctx, j)
			cancel()
			lat := time.Since(due)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				fail(err)
			case stale:
				st.stale++
			default:
				st.done++
				st.lat = append(st.lat, lat)
			}
		})
	}
	wg.Wait()
	slices.Sort(st.lat)
	return st
}

// scaleResult is one round of the scale workload on one target.
type scaleResult struct {
	objects                      int
	liveBytes, dbBytes           int64
	load, ready, list            time.Duration
	listed, chunks               int
	stored                       int64 // ConfigMaps the store counts after the load
	loadPeak                     int64 // the store's, over the load
	startPeak, listPeak, steadyP int64 // the store's, per phase
	end                          int64 // the store's RSS at the end
	apiPeak                      int64 // kube-apiserver's highest sample
	updates                      *pacedStats
}

func (r *scaleResult) peak() int64 { return max(r.startPeak, r.listPeak, r.steadyP) }

func (r *scaleResult) String() string {
	return fmt.Sprintf("load %v, kube-apiserver ready %v, full list %v (%d rows); store RSS peak %s (start %s, list %s, steady %s), end %s; live data %s; %d updates, %d errors",
		r.load.Round(100*time.Millisecond), r.ready.Round(100*time.Millisecond), r.list.Round(100*time.Millisecond), r.listed,
		fmtMB(r.peak()), fmtMB(r.startPeak), fmtMB(r.listPeak), fmtMB(r.steadyP), fmtMB(r.end), fmtMB1(r.liveBytes), r.updates.done, r.updates.errs)
}

// scalePhase tracks one phase's peak of one process: sampled, and its
// VmHWM (reset at the phase's start) at the end.
func scalePhase(s *rssSampler, pid int, name string) func() int64 {
	s.enter(name)
	hwmOK := resetPeak(pid) == nil
	return func() int64 {
		p := s.peak(name)
		if m, err := readMemory(pid); err == nil && hwmOK {
			p = max(p, m.hwm)
		}
		return p
	}
}

// runScale runs the workload on srv (a fresh store); dbSize is the
// store's size on disk or in its database.
func runScale(ctx context.Context, srv *server, fr *fresh, apiBin string, sc scaleConfig, reqTimeout time.Duration, dbSize func() int64) (*scaleResult, error) {
	conns, err := dialConns(srv.endpoint, 16)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	objs, err := newScaleObjects(sc.objects, sc.namespaces, sc.objectSize, "bench")
	if err != nil {
		return nil, err
	}
	r := &scaleResult{objects: sc.objects}
	rss := startSampler([]int{srv.pid}, "")
	defer rss.finish()

	end := scalePhase(rss, srv.pid, "load")
	t0 := time.Now()
	if err := objs.load(ctx, conns, 16, reqTimeout); err != nil {
		return nil, err
	}
	r.load, r.loadPeak, r.liveBytes = time.Since(t0), end(), objs.liveBytes.Load()
	cctx, cancel := context.WithTimeout(ctx, reqTimeout)
	got, err := conns[0].Get(cctx, "/registry/configmaps/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("count after the load: %w", err)
	}
	r.stored = got.Count
	logf("    %d objects (%s of keys and values) loaded in %v; the store counts %d", sc.objects, fmtMB1(r.liveBytes), r.load.Round(100*time.Millisecond), r.stored)

	end = scalePhase(rss, srv.pid, "start")
	t0 = time.Now()
	a, err := startAPIServer(ctx, apiBin, srv.endpoint, filepath.Join(fr.dir, "kube-apiserver"), true)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	r.ready, r.startPeak = time.Since(t0), end()
	api := startSampler([]int{a.pid}, "all")
	defer api.finish()

	end = scalePhase(rss, srv.pid, "list")
	t0 = time.Now()
	r.listed, r.chunks, err = a.listAll(ctx, "/api/v1/configmaps", sc.chunk, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	r.list, r.listPeak = time.Since(t0), end()
	// kube-apiserver keeps ConfigMaps of its own in kube-system. A short
	// list is reported (printScale), and the memory still measured.
	if r.listed < sc.objects {
		logf("    the full list returned %d ConfigMaps, fewer than the %d written (the store counts %d)", r.listed, sc.objects, r.stored)
	}
	logf("    kube-apiserver ready in %v; full list of %d in %d chunks in %v; %d updates/s for %v",
		r.ready.Round(100*time.Millisecond), r.listed, r.chunks, r.list.Round(100*time.Millisecond), sc.rate, sc.steady)

	end = scalePhase(rss, srv.pid, "steady")
	sched := schedule{start: time.Now(), rate: sc.rate}
	r.updates = runOpenLoop(ctx, sched, sched.count(sc.steady), steadyInFlight, reqTimeout, func(ctx context.Context, j int) (bool, error) {
		return objs.update(ctx, conns[j%len(conns)], j%sc.objects)
	})
	r.steadyP = end()
	r.end = rss.sample()
	api.sample()
	r.apiPeak = api.peak("all")
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// A kube-apiserver that lost its store would not slow the updates.
	if err := a.ready(ctx); err != nil {
		return nil, fmt.Errorf("kube-apiserver not ready after the updates: %w; log: %s", err, tail(a.log))
	}
	if r.updates.errs > 0 {
		return nil, fmt.Errorf("%d of %d updates failed, first: %s", r.updates.errs, sched.count(sc.steady), r.updates.firstErr)
	}
	r.dbBytes = dbSize()
	return r, nil
}

// scaleSkip leaves out PgBouncer's target: the comparison is the stores'
// own, on a direct connection.
func scaleSkip(t target) string {
	if t.name == "quantykube/pgbouncer" {
		return "the at-scale comparison is on a direct connection"
	}
	return ""
}

func printScale(w io.Writer, runs []*extraRun[*scaleResult], sc scaleConfig, apiBin string) {
	fmt.Fprintf(w, "%d ConfigMaps of %d bytes (protobuf, as kube-apiserver stores them) in %d namespaces written by 16 clients with the create Txn; %s started on the store; a full list through it in chunks of %d (kubectl get cm -A --chunk-size=%d); then %d updates/s (GuaranteedUpdate's Txn, to the store) for %v. Store RSS sampled every %v, each phase's peak the higher of the samples and VmHWM; the end is the RSS after the updates. Live data: keys and values of the live objects. The better of %d round(s).\n\n",
		sc.objects, sc.objectSize, sc.namespaces, filepath.Base(apiBin), sc.chunk, sc.chunk, sc.rate, sc.steady, rssInterval, sc.rounds)
	fmt.Fprintln(w, "| target | load | kube-apiserver ready | full list | peak RSS: load | start | list | steady | end RSS | live data | on disk | kube-apiserver peak | update p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		b := func(f func(*scaleResult) float64) float64 { return bestOf(r.rounds, f, false) }
		mb := func(f func(*scaleResult) int64) string {
			return fmtMB(int64(b(func(x *scaleResult) float64 { return float64(f(x)) })))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.t.name,
			fmtSec(b(scaleLoad)), fmtSec(b(scaleReady)), fmtSec(b(scaleList)),
			mb(func(x *scaleResult) int64 { return x.loadPeak }), mb(func(x *scaleResult) int64 { return x.startPeak }),
			mb(func(x *scaleResult) int64 { return x.listPeak }), mb(func(x *scaleResult) int64 { return x.steadyP }),
			mb(func(x *scaleResult) int64 { return x.end }), fmtMB1(r.rounds[0].liveBytes),
			mb(func(x *scaleResult) int64 { return x.dbBytes }), mb(func(x *scaleResult) int64 { return x.apiPeak }),
			fmtSec(b(func(x *scaleResult) float64 { return pct(x.updates.lat, 0.99).Seconds() })))
	}
	for _, r := range runs {
		for _, x := range r.rounds {
			if x.listed < x.objects || x.stored != int64(x.objects) {
				fmt.Fprintf(w, "\n- %s: %d ConfigMaps written, the store counted %d (a Range, count only), kube-apiserver's full list returned %d\n", r.t.name, x.objects, x.stored, x.listed)
			}
		}
	}
	printNotes(w, runs)
	printScaleTargets(w, runs)
	printRatios(w, runs, scaleRatios)
}

// printScaleTargets prints issue 58's figures: the store's peak RSS (over
// kube-apiserver's start, the list and the updates) as a multiple of
// kine's on the same engine (the target: at most 1.5x) and of etcd's (at
// most 0.5x).
func printScaleTargets(w io.Writer, runs []*extraRun[*scaleResult]) {
	peak := func(r *extraRun[*scaleResult]) float64 {
		return bestOf(r.rounds, func(x *scaleResult) float64 { return float64(x.peak()) }, false)
	}
	var rows []string
	for _, q := range runs {
		if !isQuantyKube(q.t) || len(q.rounds) == 0 {
			continue
		}
		for _, p := range runs {
			if len(p.rounds) == 0 || isQuantyKube(p.t) || (p.t.name != "etcd" && p.t.engine != q.t.engine) {
				continue
			}
			want := "1.5x"
			if p.t.name == "etcd" {
				want = "0.5x"
			}
			rows = append(rows, fmt.Sprintf("| %s ÷ %s | %.2fx | at most %s |", q.t.name, p.t.name, peak(q)/peak(p), want))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| peak store RSS (start, list, steady) | multiple | issue 58's target |")
	fmt.Fprintln(w, "|---|---:|---|")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

func scaleLoad(r *scaleResult) float64  { return r.load.Seconds() }
func scaleReady(r *scaleResult) float64 { return r.ready.Seconds() }
func scaleList(r *scaleResult) float64  { return r.list.Seconds() }

var scaleRatios = []ratioCol[*scaleResult]{
	{"load", scaleLoad, false},
	{"kube-apiserver ready", scaleReady, false},
	{"full list", scaleList, false},
	{"peak RSS", func(r *scaleResult) float64 { return float64(r.peak()) }, false},
	{"end RSS", func(r *scaleResult) float64 { return float64(r.end) }, false},
}
