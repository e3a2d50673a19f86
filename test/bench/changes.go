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
// others update at a fixed rate, in phases that alternate with the same
// updates without the reader, so that what the reader costs the writers
// shows. etcd, when given,
// takes the same updates for scale (it has no History to read).

// changesRequest is the page: every change under /registry/, newest
// first, up to now. The data was filled within minutes, so that is the
// last hour's; it gives no lower bound, which a first page newest first
// never reaches (a time would cost one index lookup, FirstRevisionFrom),
// and which the leases rule's floor (10 minutes, raised past the data
// since its fill) would refuse for the unfiltered range (ADR-031).
func changesRequest() *historypb.Request {
	return &historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Descending: true, Limit: 500}
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

// changesPairs is how many pairs of phases (updates alone, updates with
// the reader) a round's -changes-time is cut into.
const changesPairs = 6

// mergeStats is a's and b's requests together, their latencies sorted.
func mergeStats(a, b opStats) opStats {
	a.lat = append(a.lat, b.lat...)
	slices.Sort(a.lat)
	a.ops, a.errs, a.elapsed = len(a.lat), a.errs+b.errs, a.elapsed+b.elapsed
	if a.firstErr == "" {
		a.firstErr = b.firstErr
	}
	return a
}

// changesResult is one round's figures.
type changesResult struct {
	alone, withReader opStats // the updates
	reads             opStats // the pages
	entries           int     // the last page's
	etcd              opStats // etcd's updates, if measured
	views             []time.Duration
	uiBytes           int // the page's scripts and styles
	uiEntries         int // its first data page's
}

// uiViews is how many first views of the web page a round measures.
const uiViews = 10

// runChanges measures on a copy of the cached growth data (the updates
// change it), rounds times, the rounds' requests pooled.
func runChanges(ctx context.Context, qkBin, etcdBin, cacheDir, workDir string, cfg config, revs, rate, rounds int, d, every time.Duration) error {
	src, hf, err := prepareHistoryData(ctx, qkBin, cacheDir, cfg, revs)
	if err != nil {
		return err
	}
	val := strings.Repeat("u", cfg.valueSize)
	var all changesResult
	for round := 1; round <= rounds; round++ {
		dir := filepath.Join(workDir, "changes")
		os.RemoveAll(dir)
		t0 := time.Now()
		if err := copyTree(src, dir); err != nil {
			return err
		}
		logf("changes: round %d of %d: data copied in %v (load %s)", round, rounds, time.Since(t0).Round(time.Second), loadAvg())
		ui, err := newUIAPI(workDir)
		if err != nil {
			return err
		}
		srv, err := startGrowthServer(ctx, qkBin, dir, append([]string{"--retain", "0"}, ui.args...)...)
		if err != nil {
			return err
		}
		hc := historypb.NewHistoryClient(srv.conns[0].ActiveConnection())
		page := func(ctx context.Context) (int, error) {
			rctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
			defer cancel()
			resp, err := hc.Log(rctx, changesRequest())
			if err != nil {
				return 0, err
			}
			return len(resp.Entries), nil
		}
		if n, err := page(ctx); err != nil || n != 500 {
			srv.stop()
			return fmt.Errorf("changes: the first page: %d entries, %v", n, err)
		}
		// The web page's first view, before any update runs: the store
		// as filled.
		views, uiBytes, uiEntries, err := ui.firstViews(ctx, uiViews)
		if err != nil {
			srv.stop()
			return fmt.Errorf("changes: the web page's first view: %w", err)
		}
		logf("changes: round %d: the web page's first view p50 %v, slowest %v (%d bytes of scripts and styles, %d entries)",
			round, views[len(views)/2], views[len(views)-1], uiBytes, uiEntries)
		all.views, all.uiBytes, all.uiEntries = append(all.views, views...), uiBytes, uiEntries
		writers := srv.conns[1:]
		// The machine is shared: phases of d/changesPairs alternate,
		// alone and with the reader (the first of each pair in turn), so
		// that other work on it weighs on both sides alike.
		var alone, with, reads opStats
		var entries int
		var pageCPU time.Duration
		for pair := range changesPairs {
			for side := range 2 {
				if (side+pair)%2 == 0 {
					st := pacedUpdates(ctx, writers, rate, d/changesPairs, cfg, val)
					alone = mergeStats(alone, st)
					continue
				}
				var rd opStats
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
						c0, _ := cpuTime(srv.pid)
						t := time.Now()
						n, err := page(rctx)
						if rctx.Err() != nil {
							return
						}
						if err != nil {
							rd.errs++
							rd.firstErr = err.Error()
							continue
						}
						rd.lat = append(rd.lat, time.Since(t))
						// The server's CPU in the page's time: the page's,
						// and the updates' meanwhile (subtracted below).
						c1, _ := cpuTime(srv.pid)
						pageCPU += c1 - c0
						entries = n
					}
				})
				st := pacedUpdates(ctx, writers, rate, d/changesPairs, cfg, val)
				stopReader()
				wg.Wait()
				with, reads = mergeStats(with, st), mergeStats(reads, rd)
			}
		}
		srv.stop()
		os.RemoveAll(dir)
		for _, s := range []opStats{alone, with, reads} {
			if s.errs > 0 {
				return fmt.Errorf("changes: %d errors: %s", s.errs, s.firstErr)
			}
		}
		if reads.ops > 0 {
			logf("changes: round %d: the server's CPU over a page's time, %v (the updates' meanwhile included)", round, pageCPU/time.Duration(reads.ops))
		}
		logf("changes: round %d: updates alone p99 %v (%d done), with the reader p99 %v (%d done, %.2fx); pages p50 %v p99 %v (%d)",
			round, alone.p99(), alone.ops, with.p99(), with.ops, float64(with.p99())/float64(max(alone.p99(), 1)), reads.p50(), reads.p99(), reads.ops)
		all.alone, all.withReader, all.reads = mergeStats(all.alone, alone), mergeStats(all.withReader, with), mergeStats(all.reads, reads)
		all.entries = entries
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
			all.etcd = mergeStats(all.etcd, st)
		}
	}
	reader := "back to back"
	if every > 0 {
		reader = "every " + every.String()
	}
	fmt.Printf("\n### changes: the first page of the last hour's changes over %d retained revisions (SQLite), read %s, %d updates/s of %d bytes, %v a round in %d pairs of phases alone and with the reader, %d rounds pooled, load %s\n\n",
		hf.Revisions, reader, rate, cfg.valueSize, d, changesPairs, rounds, loadAvg())
	fmt.Println("| | updates p50 / p99 | updates done | pages p50 / p99 (entries) | pages read |")
	fmt.Println("|---|---:|---:|---:|---:|")
	ps := func(s opStats) string { return fmtSec(s.p50().Seconds()) + " / " + fmtSec(s.p99().Seconds()) }
	fmt.Printf("| QuantyKube, updates alone | %s | %d | | |\n", ps(all.alone), all.alone.ops)
	fmt.Printf("| QuantyKube, updates with the reader | %s | %d | %s (%d) | %d |\n", ps(all.withReader), all.withReader.ops, ps(all.reads), all.entries, all.reads.ops)
	if all.etcd.ops > 0 {
		fmt.Printf("| etcd, updates alone (a fresh store) | %s | %d | | |\n", ps(all.etcd), all.etcd.ops)
	}
	if n := len(all.views); n > 0 {
		slices.Sort(all.views)
		fmt.Printf("\nThe web page's first view (the page, its %d bytes of scripts and styles, and the timeline's first page of changes in JSON, %d entries, through the aggregated API's TLS listener, a new connection each; no update running), %d views: p50 %s, slowest %s.\n",
			all.uiBytes, all.uiEntries, n, fmtSec(all.views[n/2].Seconds()), fmtSec(all.views[n-1].Seconds()))
	}
	if a := all.alone.p99(); a > 0 {
		fmt.Printf("\nThe writers' p99 with the reader is %.2fx their p99 without it.\n", float64(all.withReader.p99())/float64(a))
	}
	return nil
}
