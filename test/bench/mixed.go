package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The mixed workload: writes and reads at once, as a cluster serves them;
// the table's phases send one kind of request at a time. -mixed-clients
// goroutines put values over -mixed-keys keys while as many get them, on 8
// connections, for -mixed-time. It reports both rates, the latencies and
// the server's CPU per operation (a PostgreSQL target's with its
// cluster's, as in the table).
//
// With -mixed-get-rate the gets go out at up to that rate, as a cluster's
// reads do, whatever the puts leave: every target that keeps up serves the
// same reads, and the puts show what each can write under them (one that
// falls behind serves fewer gets: the table shows both rates). Without it
// both sides send as fast as they are answered, and a target with cheaper
// gets gets more of them, at its puts' expense.

const mixedPrefix = "/registry/bench-mixed/"

type mixedResult struct {
	puts, gets opStats
	cpu        time.Duration // the server's (and its PostgreSQL's) in the window
}

func (r *mixedResult) cpuPerOp() float64 {
	n := r.puts.ops + r.gets.ops
	if n == 0 {
		return 0
	}
	return r.cpu.Seconds() / float64(n)
}

// mixedOps bounds each side's requests; the window (-mixed-time) ends the
// run long before on any machine this runs on.
const mixedOps = 10_000_000

// runMixed fills the keys, then runs the puts and the gets side by side.
// dbPID is the target's PostgreSQL postmaster, 0 for none.
func runMixed(ctx context.Context, srv *server, dbPID int, ec extraConfig) (*mixedResult, error) {
	conns, err := dialConns(srv.endpoint, 8)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	val := strings.Repeat("v", ec.valueSize)
	if err := fill(ctx, conns, config{reqTimeout: ec.reqTimeout}, mixedPrefix, ec.mixedKeys, val); err != nil {
		return nil, err
	}
	key := func(i int) string { return fmt.Sprintf("%sk%06d", mixedPrefix, i%ec.mixedKeys) }
	hooks := phaseHooks{serverPID: srv.pid, dbPID: dbPID}
	s0, d0, _ := hooks.phaseCPU()
	res := &mixedResult{}
	var wg sync.WaitGroup
	wg.Go(func() {
		res.puts = drive(ctx, conns, ec.mixedClients, mixedOps, ec.mixedTime, ec.reqTimeout, func(ctx context.Context, c *clientv3.Client, i int) error {
			_, err := c.Put(ctx, key(i*7919), val)
			return err
		})
	})
	var pace <-chan struct{}
	if ec.mixedGetRate > 0 {
		pctx, stop := context.WithTimeout(ctx, ec.mixedTime)
		defer stop()
		pace = pacer(pctx, ec.mixedGetRate)
	}
	wg.Go(func() {
		res.gets = drivePaced(ctx, conns, ec.mixedClients, mixedOps, ec.mixedTime, ec.reqTimeout, pace, func(ctx context.Context, c *clientv3.Client, i int) error {
			resp, err := c.Get(ctx, key(i))
			if err == nil && len(resp.Kvs) != 1 {
				err = fmt.Errorf("get %s: %d keys, want 1", key(i), len(resp.Kvs))
			}
			return err
		})
	})
	wg.Wait()
	s1, d1, _ := hooks.phaseCPU()
	res.cpu = s1 - s0 + d1 - d0
	if res.puts.ops == 0 || res.gets.ops == 0 {
		return nil, fmt.Errorf("mixed: %d puts and %d gets succeeded (first errors: %q, %q)", res.puts.ops, res.gets.ops, res.puts.firstErr, res.gets.firstErr)
	}
	return res, nil
}

// pacer hands out perSec tokens a second until ctx ends, the first at
// once. Tokens the clients are not ready to take (all waiting on the
// server) are dropped beyond 10 ms' worth (at least one), so a server that
// falls behind answers fewer gets than asked, rather than a burst later;
// the time a dropped get would have waited counts nowhere.
func pacer(ctx context.Context, perSec int) <-chan struct{} {
	ch := make(chan struct{}, max(1, perSec/100))
	go func() {
		t := time.NewTicker(max(time.Millisecond, time.Second/time.Duration(perSec)))
		defer t.Stop()
		start, sent := time.Now(), 0
		give := func(now time.Time) {
			for due := 1 + int(now.Sub(start).Seconds()*float64(perSec)); sent < due; sent++ {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
		give(start)
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				give(now)
			}
		}
	}()
	return ch
}

func mixedPuts(r *mixedResult) float64   { return r.puts.rate() }
func mixedGets(r *mixedResult) float64   { return r.gets.rate() }
func mixedGetP99(r *mixedResult) float64 { return r.gets.p99().Seconds() }
func mixedPutP99(r *mixedResult) float64 { return r.puts.p99().Seconds() }
func mixedCPU(r *mixedResult) float64    { return r.cpuPerOp() }

var mixedRatios = []ratioCol[*mixedResult]{
	{"puts/s", mixedPuts, true},
	{"put p99", mixedPutP99, false},
	{"gets/s", mixedGets, true},
	{"get p99", mixedGetP99, false},
	{"server CPU per op", mixedCPU, false},
}

func printMixed(w io.Writer, runs []*extraRun[*mixedResult], ec extraConfig) {
	gets := "as fast as each is answered"
	if ec.mixedGetRate > 0 {
		gets = fmt.Sprintf("up to %d times a second in all", ec.mixedGetRate)
	}
	fmt.Fprintf(w, "%d clients putting %d-byte values over %d keys while %d get them %s, 8 connections, %v. Server CPU per operation (a PostgreSQL target's with its cluster's) from /proc. Best of the rounds; errors: the worst round.\n\n",
		ec.mixedClients, ec.valueSize, ec.mixedKeys, ec.mixedClients, gets, ec.mixedTime)
	fmt.Fprintln(w, "| target | puts/s | put p99 | gets/s | get p50 | get p99 | server CPU per op | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	getP50 := func(r *mixedResult) float64 { return r.gets.p50().Seconds() }
	errs := func(r *mixedResult) int64 { return int64(r.puts.errs + r.gets.errs) }
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %.0f µs | %d |\n", r.t.name,
			fmtRate(bestOf(r.rounds, mixedPuts, true)), fmtSec(bestOf(r.rounds, mixedPutP99, false)),
			fmtRate(bestOf(r.rounds, mixedGets, true)), fmtSec(bestOf(r.rounds, getP50, false)), fmtSec(bestOf(r.rounds, mixedGetP99, false)),
			bestOf(r.rounds, mixedCPU, false)*1e6, worstOf(r.rounds, errs))
	}
	printNotes(w, runs)
	printRatios(w, runs, mixedRatios)
}
