package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

type idleResult struct {
	window   time.Duration
	cpu      time.Duration
	syscalls int64
}

func (r *idleResult) cpuPerMinute() time.Duration {
	return time.Duration(float64(r.cpu) / r.window.Minutes())
}

func (r *idleResult) syscallRate() float64 { return float64(r.syscalls) / r.window.Seconds() }

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

	cpu0, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	sys0, err := syscalls(srv.pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(ec.idleTime):
	}
	res := &idleResult{window: time.Since(t0)}
	cpu1, err := cpuTime(srv.pid)
	if err != nil {
		return nil, err
	}
	sys1, err := syscalls(srv.pid)
	if err != nil {
		return nil, err
	}
	res.cpu, res.syscalls = cpu1-cpu0, sys1-sys0

	if leaseOK != nil {
		if err := leaseOK(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func printIdle(w io.Writer, runs []*extraRun[*idleResult], ec extraConfig) {
	fmt.Fprintf(w, "%d keys, %d prefix watches (prev_kv, progress notify) on one connection, a lease of 15 s kept alive; nothing else for %v. Server CPU from /proc/PID/stat, read and write system calls (files and sockets) from /proc/PID/io. Best of the rounds.\n\n",
		ec.idleKeys, ec.idleWatches, ec.idleTime)
	fmt.Fprintln(w, "| target | server CPU | per minute | read+write syscalls /s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	cpu := func(r *idleResult) float64 { return r.cpu.Seconds() }
	perMin := func(r *idleResult) float64 { return r.cpuPerMinute().Seconds() }
	sys := func(r *idleResult) float64 { return r.syscallRate() }
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		// The CPU clock counts in 10 ms ticks: a quiet server may show none.
		fmt.Fprintf(w, "| %s | %s | %s | %.1f |\n", r.t.name, fmtTicks(bestOf(r.rounds, cpu, false)), fmtTicks(bestOf(r.rounds, perMin, false)), bestOf(r.rounds, sys, false))
	}
	for _, r := range runs {
		if !keepsLeases(r.t) && len(r.rounds) > 0 {
			fmt.Fprintf(w, "\n- %s: no lease kept alive (its API answers keepalives \"not supported\")\n", r.t.name)
		}
	}
	printNotes(w, runs)
	printRatios(w, runs, []ratioCol[*idleResult]{
		{"server CPU", cpu, false},
		{"syscalls /s", sys, false},
	})
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
