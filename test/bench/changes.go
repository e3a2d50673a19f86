package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// The changes mode (issue 37): the first page (500 entries, newest
// first) of "every change in the last hour" over 10^6 retained revisions,
// read by one client every -changes-read-interval (0: back to back) while
// others update at a fixed rate, and the same updates without the reader,
// so that what the reader costs the writers shows. etcd, when given,
// takes the same updates for scale (it has no History to read).

// changesRequest is the page: the last hour of every key under /registry/,
// newest first. The hour ends when the data's fill ended (the data may
// have been filled long before the run).
func changesRequest(toMs int64) *historypb.Request {
	return &historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), UnixMs: toMs - time.Hour.Milliseconds(), Descending: true, Limit: 500}
}

// pacedUpdates puts growth objects at rate per second for d, on the
// clients, and returns their latencies.
func pacedUpdates(ctx context.Context, conns []*clientv3.Client, rate int, d time.Duration, cfg config, val string) opStats {
	pace := make(chan struct{}, rate)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// Tokens every 10 ms: a steady rate, not a burst a second.
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		per := max(rate/100, 1)
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				for range per {
					select {
					case pace <- struct{}{}:
					default: // the writers are behind: the rate is not kept
					}
				}
			}
		}
	}()
	return drivePaced(ctx, conns, 32, rate*int(d.Seconds()+1), d, cfg.reqTimeout, pace, func(ctx context.Context, c *clientv3.Client, i int) error {
		_, err := c.Put(ctx, growthObj(i*7), val)
		return err
	})
}

// changesResult is one round's figures.
type changesResult struct {
	alone, withReader opStats // the updates
	reads             opStats // the pages
	entries           int     // the last page's
	etcd              opStats // etcd's updates, if measured
}

// runChanges measures on a copy of the cached growth data (the updates
// change it), rounds times, keeping each figure's better p99.
func runChanges(ctx context.Context, qkBin, etcdBin, cacheDir, workDir string, cfg config, revs, rate, rounds int, d, every time.Duration) error {
	src, hf, err := prepareHistoryData(ctx, qkBin, cacheDir, cfg, revs)
	if err != nil {
		return err
	}
	val := strings.Repeat("u", cfg.valueSize)
	var best changesResult
	for round := 1; round <= rounds; round++ {
		dir := filepath.Join(workDir, "changes")
		os.RemoveAll(dir)
		t0 := time.Now()
		if err := copyTree(src, dir); err != nil {
			return err
		}
		logf("changes: round %d of %d: data copied in %v (load %s)", round, rounds, time.Since(t0).Round(time.Second), loadAvg())
		srv, err := startGrowthServer(ctx, qkBin, dir, "--retain", "0")
		if err != nil {
			return err
		}
		hc := historypb.NewHistoryClient(srv.conns[0].ActiveConnection())
		page := func(ctx context.Context) (int, error) {
			rctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
			defer cancel()
			resp, err := hc.Log(rctx, changesRequest(hf.ToMs))
			if err != nil {
				return 0, err
			}
			return len(resp.Entries), nil
		}
		if n, err := page(ctx); err != nil || n != 500 {
			srv.stop()
			return fmt.Errorf("changes: the first page: %d entries, %v", n, err)
		}
		writers := srv.conns[1:]
		alone := pacedUpdates(ctx, writers, rate, d, cfg, val)
		var reads opStats
		var entries int
		var wg sync.WaitGroup
		rctx, stopReader := context.WithCancel(ctx)
		wg.Go(func() {
			tick := time.NewTicker(max(every, time.Microsecond))
			defer tick.Stop()
			for rctx.Err() == nil {
				if every > 0 {
					select {
					case <-tick.C:
					case <-rctx.Done():
						return
					}
				}
				t := time.Now()
				n, err := page(rctx)
				if rctx.Err() != nil {
					return
				}
				if err != nil {
					reads.errs++
					reads.firstErr = err.Error()
					continue
				}
				entries = n
				reads.lat = append(reads.lat, time.Since(t))
			}
		})
		with := pacedUpdates(ctx, writers, rate, d, cfg, val)
		stopReader()
		wg.Wait()
		srv.stop()
		os.RemoveAll(dir)
		reads.ops = len(reads.lat)
		slices.Sort(reads.lat)
		for _, s := range []opStats{alone, with, reads} {
			if s.errs > 0 {
				return fmt.Errorf("changes: %d errors: %s", s.errs, s.firstErr)
			}
		}
		logf("changes: round %d: updates alone p99 %v (%d done), with the reader p99 %v (%d done, %.2fx); pages p50 %v p99 %v (%d)",
			round, alone.p99(), alone.ops, with.p99(), with.ops, float64(with.p99())/float64(max(alone.p99(), 1)), reads.p50(), reads.p99(), reads.ops)
		best.alone, best.withReader, best.reads = betterP99(best.alone, alone), betterP99(best.withReader, with), betterP99(best.reads, reads)
		best.entries = entries
	}
	if etcdBin != "" {
		for round := 1; round <= rounds; round++ {
			dir := filepath.Join(workDir, "changes-etcd")
			os.RemoveAll(dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			srv, conns, err := launchDialled(ctx, etcdTarget(etcdBin), dir, "")
			if err != nil {
				return err
			}
			st := pacedUpdates(ctx, conns, rate, d, cfg, val)
			srv.stop()
			os.RemoveAll(dir)
			if st.errs > 0 {
				return fmt.Errorf("changes: etcd: %d errors: %s", st.errs, st.firstErr)
			}
			logf("changes: etcd round %d: updates p99 %v", round, st.p99())
			best.etcd = betterP99(best.etcd, st)
		}
	}
	reader := "back to back"
	if every > 0 {
		reader = "every " + every.String()
	}
	fmt.Printf("\n### changes: the first page of the last hour's changes over %d retained revisions (SQLite), read %s, %d updates/s of %d bytes for %v, better p99 of %d, load %s\n\n",
		hf.Revisions, reader, rate, cfg.valueSize, d, rounds, loadAvg())
	fmt.Println("| | updates p50 / p99 | updates done | pages p50 / p99 (entries) | pages read |")
	fmt.Println("|---|---:|---:|---:|---:|")
	ps := func(s opStats) string { return fmtSec(s.p50().Seconds()) + " / " + fmtSec(s.p99().Seconds()) }
	fmt.Printf("| QuantyKube, updates alone | %s | %d | | |\n", ps(best.alone), best.alone.ops)
	fmt.Printf("| QuantyKube, updates with the reader | %s | %d | %s (%d) | %d |\n", ps(best.withReader), best.withReader.ops, ps(best.reads), best.entries, best.reads.ops)
	if best.etcd.ops > 0 {
		fmt.Printf("| etcd, updates alone (a fresh store) | %s | %d | | |\n", ps(best.etcd), best.etcd.ops)
	}
	if a := best.alone.p99(); a > 0 {
		fmt.Printf("\nThe writers' p99 with the reader is %.2fx their p99 without it.\n", float64(best.withReader.p99())/float64(a))
	}
	return nil
}
