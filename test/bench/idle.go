package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The idle workload: a server holding some keys, with watches open and a
// lease kept alive, and no other traffic. What it costs is what a quiet
// cluster pays all day: its CPU time, and its read and write system calls
// (files and sockets; a poller shows there). Statements are not counted:
// no peer exposes them.
//
// With -idle-apiserver the client is kube-apiserver itself, as issue 14
// states the target: started on the server, ready, left to settle, then
// measured with nobody using it. Its own reads and writes (leases,
// compaction, its watches) are the load. On PostgreSQL the database's
// transactions per second show a poller: each of its queries is one.

type idleResult struct {
	window   time.Duration
	cpu      time.Duration
	syscalls int64
	// With kube-apiserver: its CPU in the window, and, on PostgreSQL, the
	// transactions of the target's database (-1 elsewhere).
	apiCPU time.Duration
	xacts  int64
}

func (r *idleResult) cpuPerMinute() time.Duration {
	return time.Duration(float64(r.cpu) / r.window.Minutes())
}

func (r *idleResult) syscallRate() float64 { return float64(r.syscalls) / r.window.Seconds() }

func (r *idleResult) xactRate() float64 { return float64(r.xacts) / r.window.Seconds() }

// idleSample is one reading of the counters an idle window is the
// difference of.
type idleSample struct {
	cpu, apiCPU     time.Duration
	syscalls, xacts int64
}

// idleCounters reads the server's counters, kube-apiserver's CPU if apiPid
// is not 0, and the database's transactions if xacts is not nil.
func idleCounters(ctx context.Context, pid, apiPid int, xacts func(context.Context) (int64, error)) (idleSample, error) {
	var s idleSample
	var err error
	if s.cpu, err = cpuTime(pid); err != nil {
		return s, err
	}
	if s.syscalls, err = syscalls(pid); err != nil {
		return s, err
	}
	if apiPid != 0 {
		if s.apiCPU, err = cpuTime(apiPid); err != nil {
			return s, fmt.Errorf("kube-apiserver: %w", err)
		}
	}
	s.xacts = -1
	if xacts != nil {
		if s.xacts, err = xacts(ctx); err != nil {
			return s, err
		}
	}
	return s, nil
}

// idleWindow waits d and returns what the counters moved by.
func idleWindow(ctx context.Context, d time.Duration, pid, apiPid int, xacts func(context.Context) (int64, error)) (*idleResult, error) {
	s0, err := idleCounters(ctx, pid, apiPid, xacts)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return nil, err
	}
	window := time.Since(t0)
	s1, err := idleCounters(ctx, pid, apiPid, xacts)
	if err != nil {
		return nil, err
	}
	r := &idleResult{window: window, cpu: s1.cpu - s0.cpu, syscalls: s1.syscalls - s0.syscalls, apiCPU: s1.apiCPU - s0.apiCPU, xacts: -1}
	if xacts != nil {
		r.xacts = s1.xacts - s0.xacts
	}
	return r, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// runIdle measures srv at rest; keepAlive false leaves the lease out (kine
// grants leases but answers keepalives "not supported").
func runIdle(ctx context.Context, srv *server, ec extraConfig, keepAlive bool) (*idleResult, error) {
	c, err := newClient(srv.endpoint)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	prefix := func(i int) string { return fmt.Sprintf("/registry/bench-idle/r%02d/", i) }
	val := strings.Repeat("v", ec.valueSize)
	// Plain puts, which every peer takes (kine accepts no multi-put Txn).
	fcfg := config{reqTimeout: ec.reqTimeout}
	for i := 0; i < ec.idleWatches; i++ {
		n := ec.idleKeys / ec.idleWatches
		if i < ec.idleKeys%ec.idleWatches {
			n++
		}
		if err := fill(ctx, []*clientv3.Client{c}, fcfg, prefix(i), n, val); err != nil {
			return nil, err
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	// As kube-apiserver watches a resource: from the list's revision,
	// with prev_kv and progress notifications.
	for i := 0; i < ec.idleWatches; i++ {
		wch := c.Watch(wctx, prefix(i), clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
		select {
		case resp, ok := <-wch:
			if !ok || !resp.Created {
				return nil, fmt.Errorf("watch %d not created: %v", i, resp.Err())
			}
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("watch %d not created within 30s", i)
		}
		go func() {
			for range wch {
			}
		}()
	}
	var leaseOK func() error
	if keepAlive {
		var err error
		if leaseOK, err = keepLease(ctx, wctx, c, val, ec.reqTimeout); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second) // let the start settle
	res, err := idleWindow(ctx, ec.idleTime, srv.pid, 0, nil)
	if err != nil {
		return nil, err
	}
	if leaseOK != nil {
		if err := leaseOK(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// runIdleAPIServer starts kube-apiserver (ec.idleAPIServer) on srv, lets
// it settle for ec.idleSettle, then measures ec.idleTime of nothing else.
// pg is the cluster of a PostgreSQL target (db its database), else nil.
func runIdleAPIServer(ctx context.Context, srv *server, fr *fresh, pg *pgCluster, ec extraConfig) (*idleResult, error) {
	t0 := time.Now()
	a, err := startAPIServer(ctx, ec.idleAPIServer, srv.endpoint, filepath.Join(fr.dir, "kube-apiserver"), false)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	logf("    kube-apiserver ready after %v; settling for %v, then %v measured", time.Since(t0).Round(100*time.Millisecond), ec.idleSettle, ec.idleTime)
	if err := sleepCtx(ctx, ec.idleSettle); err != nil {
		return nil, err
	}
	var xacts func(context.Context) (int64, error)
	if pg != nil {
		xacts = func(ctx context.Context) (int64, error) { return pg.transactions(ctx, fr.db) }
	}
	res, err := idleWindow(ctx, ec.idleTime, srv.pid, a.pid, xacts)
	if err != nil {
		return nil, err
	}
	// A kube-apiserver that lost its store would make a quiet window too.
	if err := a.ready(ctx); err != nil {
		return nil, fmt.Errorf("kube-apiserver not ready at the end of the window: %w; log: %s", err, tail(a.log))
	}
	return res, nil
}

func printIdle(w io.Writer, runs []*extraRun[*idleResult], ec extraConfig) {
	if ec.idleAPIServer != "" {
		printIdleAPIServer(w, runs, ec)
		return
	}
	fmt.Fprintf(w, "%d keys, %d prefix watches (prev_kv, progress notify) on one connection, a lease of 15 s kept alive; nothing else for %v. Server CPU from /proc/PID/stat, read and write system calls (files and sockets) from /proc/PID/io. Best of the rounds.\n\n",
		ec.idleKeys, ec.idleWatches, ec.idleTime)
	fmt.Fprintln(w, "| target | server CPU | per minute | read+write syscalls /s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f |\n", r.t.name, fmtTicks(bestOf(r.rounds, idleCPU, false)), fmtTicks(bestOf(r.rounds, idlePerMin, false)), bestOf(r.rounds, idleSyscalls, false))
	}
	for _, r := range runs {
		if !keepsLeases(r.t) && len(r.rounds) > 0 {
			fmt.Fprintf(w, "\n- %s: no lease kept alive (its API answers keepalives \"not supported\")\n", r.t.name)
		}
	}
	printNotes(w, runs)
	printRatios(w, runs, idleRatios)
}

func printIdleAPIServer(w io.Writer, runs []*extraRun[*idleResult], ec extraConfig) {
	fmt.Fprintf(w, "kube-apiserver (%s) on the target, ready, left %v to settle, then %v with nobody using it. Store CPU from /proc/PID/stat of the target's process (PostgreSQL's own processes not counted), its read and write system calls (files and sockets) from /proc/PID/io; kube-apiserver's CPU in the same window; database transactions from pg_stat_database (PostgreSQL targets). Best of the rounds.\n\n",
		filepath.Base(ec.idleAPIServer), ec.idleSettle, ec.idleTime)
	fmt.Fprintln(w, "| target | store CPU | per minute | read+write syscalls /s | kube-apiserver CPU | database transactions /s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	api := func(r *idleResult) float64 { return r.apiCPU.Seconds() }
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		xacts := "–"
		if r.rounds[0].xacts >= 0 {
			// The lowest rate, zero included (bestOf skips zeros as
			// missing): none at all is what the target asks for.
			low := r.rounds[0].xactRate()
			for _, x := range r.rounds[1:] {
				low = min(low, x.xactRate())
			}
			xacts = fmt.Sprintf("%.2f", low)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f | %s | %s |\n", r.t.name, fmtTicks(bestOf(r.rounds, idleCPU, false)), fmtTicks(bestOf(r.rounds, idlePerMin, false)),
			bestOf(r.rounds, idleSyscalls, false), fmtTicks(bestOf(r.rounds, api, false)), xacts)
	}
	printNotes(w, runs)
	printRatios(w, runs, idleRatios)
}

func idleCPU(r *idleResult) float64      { return r.cpu.Seconds() }
func idlePerMin(r *idleResult) float64   { return r.cpuPerMinute().Seconds() }
func idleSyscalls(r *idleResult) float64 { return r.syscallRate() }

var idleRatios = []ratioCol[*idleResult]{
	{"server CPU", idleCPU, false},
	{"syscalls /s", idleSyscalls, false},
}

// fmtTicks is a CPU time from /proc, where zero means under one tick.
func fmtTicks(s float64) string {
	if s == 0 {
		return "< 10 ms"
	}
	return fmtSec(s)
}

// keepLease grants a lease of 15 s with a key on it, as kube-apiserver's
// leases always have one, and keeps it alive until wctx ends; the function
// it returns tells whether the lease is still alive.
func keepLease(ctx, wctx context.Context, c *clientv3.Client, val string, reqTimeout time.Duration) (func() error, error) {
	gctx, gcancel := context.WithTimeout(ctx, reqTimeout)
	lease, err := c.Grant(gctx, 15)
	gcancel()
	if err != nil {
		return nil, fmt.Errorf("grant: %w", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, reqTimeout)
	_, err = c.Put(pctx, "/registry/bench-idle/leased", val, clientv3.WithLease(lease.ID))
	pcancel()
	if err != nil {
		return nil, fmt.Errorf("put with lease: %w", err)
	}
	ka, err := c.KeepAlive(wctx, lease.ID)
	if err != nil {
		return nil, fmt.Errorf("keepalive: %w", err)
	}
	// Keepalive answers, and whether one said the lease was gone; the
	// channel closes early if the lease is lost.
	var answers, lost atomic.Int64
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		for r := range ka {
			answers.Add(1)
			if r.TTL <= 0 {
				lost.Add(1)
			}
		}
	}()
	return func() error {
		select {
		case <-kaDone:
			return errors.New("the lease's keepalive ended during the window")
		default:
		}
		if answers.Load() < 2 || lost.Load() > 0 {
			return fmt.Errorf("the lease was not kept alive: %d keepalive answers, %d without a TTL", answers.Load(), lost.Load())
		}
		return nil
	}, nil
}

// keepsLeases is false for kine, which grants leases but refuses
// keepalives.
func keepsLeases(t target) bool { return !strings.HasPrefix(t.name, "kine") }
