package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// growthServer is one QuantyKube process on the growth data directory.
type growthServer struct {
	endpoint string
	pid      int
	conns    []*clientv3.Client
	stop     func()
}

func startGrowthServer(ctx context.Context, bin, dir string, extra ...string) (*growthServer, error) {
	srv, conns, err := launchDialled(ctx, quantykubeTarget("quantykube", bin, nil, extra), dir, "")
	if err != nil {
		return nil, err
	}
	return &growthServer{endpoint: srv.endpoint, pid: srv.pid, conns: conns, stop: srv.stop}, nil
}

// The growth data: Puts cycling over growthObjects keys; one in eleven goes
// to a 500-key listed prefix and one in 997 to the hot key, which so reaches
// about 1,000 revisions at 10^6.
const (
	growthObjects    = 5000
	growthListPrefix = "/registry/growth/list/"
	growthHot        = "/registry/growth/hot"
)

func growthObj(i int) string { return fmt.Sprintf("/registry/growth/obj/k%06d", i%growthObjects) }

// growthFill writes the growth data's Puts number start to start+n-1.
func growthFill(ctx context.Context, conns []*clientv3.Client, cfg config, start, n int, val string) error {
	return growthFillPaced(ctx, conns, cfg, start, n, val, 0)
}

// growthFillPaced is growthFill at rate Puts per second at most (0: as
// fast as they go).
func growthFillPaced(ctx context.Context, conns []*clientv3.Client, cfg config, start, n int, val string, rate float64) error {
	t0 := time.Now()
	st := drive(ctx, conns, 64, n, 2*time.Hour, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
		if rate > 0 {
			if d := time.Until(t0.Add(time.Duration(float64(j) / rate * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
		}
		n := start + j
		k := growthObj(n)
		switch {
		case n%997 == 0:
			k = growthHot
		case n%11 == 0:
			k = fmt.Sprintf("%sk%06d", growthListPrefix, n%500)
		}
		_, err := c.Put(ctx, k, val)
		return err
	})
	if st.errs > 0 || st.ops != n {
		return fmt.Errorf("%d of %d puts done, %d errors (%s)", st.ops, n, st.errs, st.firstErr)
	}
	return nil
}

// betterP99 is whichever of two passes had the lower p99.
func betterP99(a, b opStats) opStats {
	if a.ops == 0 || (b.ops > 0 && b.p99() < a.p99()) {
		return b
	}
	return a
}

// historyGets times quantykube.History's Get of one of the growth objects
// at a random time in [fromMs, toMs), on clients clients.
func historyGets(ctx context.Context, cs []*clientv3.Client, clients int, cfg config, fromMs, toMs int64) opStats {
	return drive(ctx, cs, clients, 2000, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
		at := fromMs + rand.Int64N(max(toMs-fromMs, 1))
		_, err := historypb.NewHistoryClient(c.ActiveConnection()).Get(ctx, &historypb.Request{Key: []byte(growthObj(j * 13)), UnixMs: at})
		return err
	})
}

// historyLogs times quantykube.History's Log of the hot key, one page of up
// to 1,000 entries, on clients clients; entries is the last page's size.
func historyLogs(ctx context.Context, cs []*clientv3.Client, clients int, cfg config) (opStats, int) {
	return historyLogsOf(ctx, cs, clients, cfg, func() string { return growthHot })
}

// historyObjLogs times the Log of a growth object drawn at random, each
// read for the first time or nearly: the hot key's Log, read again and
// again, finds its own rows in whatever cache holds them, where a user's
// Log of some object does not.
func historyObjLogs(ctx context.Context, cs []*clientv3.Client, clients int, cfg config) (opStats, int) {
	return historyLogsOf(ctx, cs, clients, cfg, func() string { return growthObj(rand.IntN(growthObjects)) })
}

// historyBusyLogs times the hot key's Log while another client commits
// without pause. Any commit empties the page cache of every SQLite read
// connection (a reader keeps its pages only while the database has not
// changed), and a live cluster commits between any two requests a user
// makes, so this is the Log a user of a busy cluster gets; historyLogs,
// on a store at rest, reads the key's pages from the previous request.
// The commits grant and revoke a lease: they add no revision to the
// cached data.
func historyBusyLogs(ctx context.Context, cs []*clientv3.Client, clients int, cfg config) (opStats, int) {
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wctx.Err() == nil {
			g, err := cs[0].Grant(wctx, 60)
			if err != nil {
				return
			}
			if _, err := cs[0].Revoke(wctx, g.ID); err != nil {
				return
			}
		}
	}()
	defer func() { stop(); <-done }()
	return historyLogs(ctx, cs, clients, cfg)
}

func historyLogsOf(ctx context.Context, cs []*clientv3.Client, clients int, cfg config, key func() string) (opStats, int) {
	var got atomic.Int64
	st := drive(ctx, cs, clients, 50*clients, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
		resp, err := historypb.NewHistoryClient(c.ActiveConnection()).Log(ctx, &historypb.Request{Key: []byte(key()), Limit: 1000})
		if err == nil {
			got.Store(int64(len(resp.Entries)))
		}
		return err
	})
	return st, int(got.Load())
}

// runGrowth measures QuantyKube as retained history grows: one server
// keeping everything (--retain 0), filled with updates to checkpoints of
// retained revisions (10^4, then 10^6), measured twice at each (the better
// p99 counts). At each checkpoint also quantykube.History: Get at a time,
// and Log of one key with (at the last checkpoint) about 1,000 revisions.
// Last, the server restarts with a 75 s retention window so that pruning
// removes nearly all of that history while updates are measured.
//
// The update p99s of two checkpoints are minutes apart, and the machine's
// phase moves them more than the history does. So, with pairedRounds > 0,
// the data as it stood at the first checkpoint is kept as a copy, served
// by a second process at the end beside the first, and updates are timed
// on both in turn, in alternating order, pairedRounds times: the median
// of the rounds' ratios is the growth figure.
func runGrowth(ctx context.Context, bin, workDir string, cfg config, checkpoints []int, pairedRounds int) error {
	dir := filepath.Join(workDir, "growth")
	firstDir := dir + "-first"
	for _, d := range []string{dir, firstDir} {
		os.RemoveAll(d)
		defer os.RemoveAll(d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	srv, err := startGrowthServer(ctx, bin, dir, "--retain", "0")
	if err != nil {
		return err
	}
	defer func() { srv.stop() }()
	conns := srv.conns
	val := strings.Repeat("v", cfg.valueSize)
	if err := fill(ctx, conns, cfg, growthListPrefix, 500, val); err != nil {
		return err
	}
	fillStart := time.Now().UnixMilli()

	type row struct {
		revs                     int64
		size                     int64
		upd, get, list, listPast opStats
		hGet, hLog               opStats
		logEntries               int
		fillRate                 float64
	}
	var rows []row
	rev := func(c *clientv3.Client) int64 {
		cctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
		defer cancel()
		r, err := c.Get(cctx, "/registry/growth/none")
		if err != nil {
			return 0
		}
		return r.Header.Revision
	}
	const clients = 16
	// Updates go to the objects in key order, or spread over them
	// (strided) as a cluster's updates come, in no order of their keys.
	updatesOf := func(stride int) func(cs []*clientv3.Client, n int, d time.Duration) opStats {
		return func(cs []*clientv3.Client, n int, d time.Duration) opStats {
			return drive(ctx, cs, clients, n, d, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
				k := growthObj(j * stride)
				g, err := c.Get(ctx, k)
				if err != nil {
					return err
				}
				var mod int64
				if len(g.Kvs) == 1 {
					mod = g.Kvs[0].ModRevision
				}
				_, err = c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", mod)).Then(clientv3.OpPut(k, val)).Else(clientv3.OpGet(k)).Commit()
				return err
			})
		}
	}
	measureUpdates := updatesOf(1)
	i := 0
	for _, cp := range checkpoints {
		need := cp - int(rev(conns[0]))
		t0 := time.Now()
		if need > 0 {
			if err := growthFill(ctx, conns, cfg, i, need, val); err != nil {
				return fmt.Errorf("fill to %d: %w", cp, err)
			}
			i += need
		}
		r := row{revs: rev(conns[0])}
		if need > 0 {
			r.fillRate = float64(need) / time.Since(t0).Seconds()
		}
		logf("growth: %d revisions (filled at %.0f/s)", r.revs, r.fillRate)
		cs := conns[:clients]
		for round := 0; round < 2; round++ {
			cur := rev(conns[0])
			upd := measureUpdates(cs, 3000, cfg.phaseTime)
			get := drive(ctx, cs, clients, 5000, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
				_, err := c.Get(ctx, growthObj(j*7))
				return err
			})
			list := drive(ctx, cs, clients, 200, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
				_, err := c.Get(ctx, growthListPrefix, clientv3.WithPrefix(), clientv3.WithLimit(500))
				return err
			})
			// A page of a paged list pinned 1,000 revisions back.
			past := drive(ctx, cs, clients, 200, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
				_, err := c.Get(ctx, growthListPrefix, clientv3.WithPrefix(), clientv3.WithLimit(500), clientv3.WithRev(cur-1000))
				return err
			})
			hGet := historyGets(ctx, cs, clients, cfg, fillStart, time.Now().UnixMilli())
			hLog, entries := historyLogs(ctx, cs, 1, cfg)
			r.upd, r.get, r.list, r.listPast = betterP99(r.upd, upd), betterP99(r.get, get), betterP99(r.list, list), betterP99(r.listPast, past)
			r.hGet, r.hLog, r.logEntries = betterP99(r.hGet, hGet), betterP99(r.hLog, hLog), entries
			for _, s := range []opStats{upd, get, list, past, hGet, hLog} {
				if s.errs > 0 {
					logf("growth: %d errors: %s", s.errs, s.firstErr)
				}
			}
		}
		r.size = dirSize(dir)
		rows = append(rows, r)
		if len(rows) == 1 && len(checkpoints) > 1 && pairedRounds > 0 {
			srv.stop()
			if err := copyTree(dir, firstDir); err != nil {
				return fmt.Errorf("keep the first checkpoint's data: %w", err)
			}
			if srv, err = startGrowthServer(ctx, bin, dir, "--retain", "0"); err != nil {
				return err
			}
			conns = srv.conns
		}
	}

	var paired []pairedUpdates
	if len(rows) > 1 && pairedRounds > 0 {
		first, err := startGrowthServer(ctx, bin, firstDir, "--retain", "0")
		if err != nil {
			return err
		}
		servers := [2]*growthServer{first, srv}
		for round := 1; round <= pairedRounds && ctx.Err() == nil; round++ {
			var pu pairedUpdates
			for o, stride := range []int{1, growthStride} {
				for _, i := range roundOrder(2, round) {
					st := updatesOf(stride)(servers[i].conns[:clients], 3000, cfg.phaseTime)
					if st.errs > 0 {
						logf("growth: %d errors: %s", st.errs, st.firstErr)
					}
					pu[o][i] = st
				}
			}
			logf("growth: paired round %d: update p50 / p99 at the first checkpoint and the last, in key order %v / %v and %v / %v, spread %v / %v and %v / %v", round,
				pu[0][0].p50(), pu[0][0].p99(), pu[0][1].p50(), pu[0][1].p99(), pu[1][0].p50(), pu[1][0].p99(), pu[1][1].p50(), pu[1][1].p99())
			paired = append(paired, pu)
		}
		first.stop()
	}

	// Retention: restart with a 75 s window; nearly all of the history is
	// older, so pruning has ~everything to remove while updates run.
	srv.stop()
	srv, err = startGrowthServer(ctx, bin, dir, "--retain", "75s", "--prune-interval", "1s")
	if err != nil {
		return err
	}
	oldest := func() int64 {
		cctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
		defer cancel()
		resp, err := historypb.NewHistoryClient(srv.conns[0].ActiveConnection()).Log(cctx, &historypb.Request{Key: []byte("/"), RangeEnd: []byte{0}, Limit: 1})
		if err != nil || len(resp.Entries) == 0 {
			return 0
		}
		return resp.Entries[0].Revision
	}
	before := oldest()
	pruneStart := time.Now()
	var pruning opStats
	for k := 0; k < 3; k++ { // three windows of phaseTime while pruning works
		st := measureUpdates(srv.conns[:clients], 100_000, cfg.phaseTime)
		logf("growth: updates under pruning, window %d: %d ops p50 %v p99 %v, oldest retained revision %d", k+1, st.ops, st.p50(), st.p99(), oldest())
		if k == 0 {
			pruning = st
		}
	}
	after := oldest()
	sizeAfter := dirSize(dir)

	fmt.Printf("\n### Growth: QuantyKube (SQLite), %d clients, %d-byte values, better p99 of 2 per checkpoint\n\n", clients, cfg.valueSize)
	fmt.Println("| retained revisions | update txn p50 / p99 | get p50 / p99 | list 500 p50 / p99 | list 500 at rev-1000 p50 / p99 | History Get at a time p50 / p99 | History Log of one key p50 / p99 (entries) | database | bytes per revision |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	ps := func(s opStats) string { return fmtSec(s.p50().Seconds()) + " / " + fmtSec(s.p99().Seconds()) }
	for _, r := range rows {
		fmt.Printf("| %d | %s | %s | %s | %s | %s | %s (%d) | %s | %.0f |\n", r.revs,
			ps(r.upd), ps(r.get), ps(r.list), ps(r.listPast), ps(r.hGet), ps(r.hLog), r.logEntries,
			fmtMB(r.size), float64(r.size)/float64(max(r.revs, 1)))
	}
	if len(rows) >= 2 {
		a, b := rows[0], rows[len(rows)-1]
		ch := func(x, y opStats) string {
			if x.p99() == 0 {
				return "–"
			}
			return fmt.Sprintf("%+.0f%%", 100*(y.p99().Seconds()/x.p99().Seconds()-1))
		}
		fmt.Printf("\np99 change from %d to %d revisions: update %s, get %s, list %s, list at rev-1000 %s (target: within 20%%)\n",
			a.revs, b.revs, ch(a.upd, b.upd), ch(a.get, b.get), ch(a.list, b.list), ch(a.listPast, b.listPast))
	}
	if len(paired) > 0 {
		fmt.Printf("\nUpdates timed in turn on both, %d paired rounds (the first checkpoint's data served by a second process, alternating which goes first), at %d against %d revisions, the median of the rounds' ratios (min-max) (target for p99: 1.10x or less):\n",
			len(paired), rows[len(rows)-1].revs, rows[0].revs)
		for o, order := range []string{"in key order (as above)", "spread over the keys (stride " + fmt.Sprint(growthStride) + ")"} {
			var p50s, p99s []float64
			for _, pu := range paired {
				if a, b := pu[o][0], pu[o][1]; a.ops > 0 && b.ops > 0 {
					p50s = append(p50s, b.p50().Seconds()/a.p50().Seconds())
					p99s = append(p99s, b.p99().Seconds()/a.p99().Seconds())
				}
			}
			fmt.Printf("- %s: p50 %s, p99 %s\n", order, fmtMedian(p50s), fmtMedian(p99s))
		}
	}
	last := rows[len(rows)-1]
	fmt.Printf("\nUpdates while retention pruning runs (restarted with --retain 75s --prune-interval 1s; first %v window): p50 %s, p99 %s, %.0f/s; without pruning at %d revisions: p50 %s, p99 %s. Oldest retained revision %d before, %d after %v; database %s before, %s after (SQLite reuses freed pages; the file does not shrink without defragment).\n",
		cfg.phaseTime, fmtSec(pruning.p50().Seconds()), fmtSec(pruning.p99().Seconds()), pruning.rate(), last.revs,
		fmtSec(last.upd.p50().Seconds()), fmtSec(last.upd.p99().Seconds()), before, after, time.Since(pruneStart).Round(time.Second), fmtMB(last.size), fmtMB(sizeAfter))
	return nil
}

// pairedUpdates is one paired round's updates, in key order and then
// strided: at the first checkpoint, then at the last.
type pairedUpdates [2][2]opStats

// growthStride spreads consecutive updates over the growth objects: a
// prime, so every object is reached.
const growthStride = 7919

// copyTree copies the regular files of the directory tree src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// historyFill records what a cached History data directory holds.
type historyFill struct {
	Revisions int64 `json:"revisions"`
	// FromMs and ToMs bracket the fill's commit times.
	FromMs int64 `json:"from_ms"`
	ToMs   int64 `json:"to_ms"`
}

// prepareHistoryData returns a data directory under cacheDir holding the
// growth data at revs revisions, filling it with bin the first time: the
// fill takes minutes, and History's reads do not change the data, so one
// fill serves every later run (and every binary measured on it).
func prepareHistoryData(ctx context.Context, bin, cacheDir string, cfg config, revs int) (string, historyFill, error) {
	dir := filepath.Join(cacheDir, fmt.Sprintf("history-%d-%db", revs, cfg.valueSize))
	meta := filepath.Join(dir, "fill.json")
	var hf historyFill
	if b, err := os.ReadFile(meta); err == nil {
		if err := json.Unmarshal(b, &hf); err != nil {
			return "", hf, fmt.Errorf("%s: %w", meta, err)
		}
		logf("history: reusing %s (%d revisions)", dir, hf.Revisions)
		return dir, hf, nil
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", hf, err
	}
	srv, err := startGrowthServer(ctx, bin, dir, "--retain", "0")
	if err != nil {
		return "", hf, err
	}
	defer srv.stop()
	val := strings.Repeat("v", cfg.valueSize)
	if err := fill(ctx, srv.conns, cfg, growthListPrefix, 500, val); err != nil {
		return "", hf, err
	}
	hf.FromMs = time.Now().UnixMilli()
	t0 := time.Now()
	logf("history: filling %s to %d revisions (once; later runs reuse it)", dir, revs)
	if err := growthFill(ctx, srv.conns, cfg, 0, revs-501, val); err != nil {
		return "", hf, fmt.Errorf("history fill: %w", err)
	}
	hf.ToMs = time.Now().UnixMilli()
	cctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
	defer cancel()
	r, err := srv.conns[0].Get(cctx, growthHot)
	if err != nil {
		return "", hf, err
	}
	hf.Revisions = r.Header.Revision
	logf("history: filled %d revisions in %v", hf.Revisions, time.Since(t0).Round(time.Second))
	b, err := json.Marshal(hf)
	if err != nil {
		return "", hf, err
	}
	return dir, hf, os.WriteFile(meta, b, 0o644)
}

// historyRow is one binary's History latencies at one client count.
type historyRow struct {
	clients          int
	get, log, objLog opStats
	// busyLog is log's request while another client commits.
	busyLog opStats
	// entries and objEntries are the last Log page's length.
	entries, objEntries int
	// getCPU, logCPU and objLogCPU are the server's CPU time per request,
	// the least of the rounds: unlike latency, little moved by other work
	// on the machine.
	getCPU, logCPU, objLogCPU time.Duration
}

// serverCPU runs f and returns its result with the server's CPU time per
// successful request during it (0 if unreadable).
func serverCPU(pid int, f func() opStats) (opStats, time.Duration) {
	c0, err0 := cpuTime(pid)
	st := f()
	c1, err1 := cpuTime(pid)
	if err0 != nil || err1 != nil || st.ops == 0 {
		return st, 0
	}
	return st, (c1 - c0) / time.Duration(st.ops)
}

// leastCPU keeps the smaller of two per-request CPU times, 0 meaning none.
func leastCPU(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// runHistory measures only quantykube.History, on cached growth data (see
// prepareHistoryData): Get at a time and Log of the ~1,000-revision hot key,
// each at 1 and 16 clients, the better p99 of rounds passes; with base, that
// binary too, on the same data in the same run.
func runHistory(ctx context.Context, bins map[string]string, names []string, extra []string, cacheDir string, cfg config, revs, rounds int) error {
	dir, hf, err := prepareHistoryData(ctx, bins[names[0]], cacheDir, cfg, revs)
	if err != nil {
		return err
	}
	levels := []int{1, 16}
	results := map[string][]historyRow{}
	for round := 1; round <= rounds; round++ {
		for _, i := range roundOrder(len(names), round) {
			name := names[i]
			logf("history: %s, round %d of %d (load %s)", name, round, rounds, loadAvg())
			srv, err := startGrowthServer(ctx, bins[name], dir, append([]string{"--retain", "0"}, extra...)...)
			if err != nil {
				return err
			}
			rows := results[name]
			for i, n := range levels {
				cs := srv.conns[:n]
				get, getCPU := serverCPU(srv.pid, func() opStats { return historyGets(ctx, cs, n, cfg, hf.FromMs, hf.ToMs) })
				var entries, objEntries int
				log, logCPU := serverCPU(srv.pid, func() opStats {
					var st opStats
					st, entries = historyLogs(ctx, cs, n, cfg)
					return st
				})
				objLog, objLogCPU := serverCPU(srv.pid, func() opStats {
					var st opStats
					st, objEntries = historyObjLogs(ctx, cs, n, cfg)
					return st
				})
				busyLog, _ := historyBusyLogs(ctx, cs, n, cfg)
				for _, s := range []opStats{get, log, objLog, busyLog} {
					if s.errs > 0 {
						srv.stop()
						return fmt.Errorf("history %s: %d errors: %s", name, s.errs, s.firstErr)
					}
				}
				if len(rows) <= i {
					rows = append(rows, historyRow{clients: n})
				}
				r := &rows[i]
				r.get, r.log, r.objLog, r.busyLog = betterP99(r.get, get), betterP99(r.log, log), betterP99(r.objLog, objLog), betterP99(r.busyLog, busyLog)
				r.entries, r.objEntries = entries, objEntries
				r.getCPU, r.logCPU, r.objLogCPU = leastCPU(r.getCPU, getCPU), leastCPU(r.logCPU, logCPU), leastCPU(r.objLogCPU, objLogCPU)
			}
			results[name] = rows
			srv.stop()
		}
	}
	fmt.Printf("\n### History at %d retained revisions (SQLite), %d-byte values, better p99 of %d, load %s\n\n", hf.Revisions, cfg.valueSize, rounds, loadAvg())
	fmt.Println("| binary | clients | Get at a time p50 / p99 | server CPU per Get | Log of one key p50 / p99 (entries) | server CPU per Log | the same while another client commits | Log of a random object p50 / p99 (entries) | server CPU per Log |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	ps := func(s opStats) string { return fmtSec(s.p50().Seconds()) + " / " + fmtSec(s.p99().Seconds()) }
	for _, name := range names {
		for _, r := range results[name] {
			fmt.Printf("| %s | %d | %s | %s | %s (%d) | %s | %s | %s (%d) | %s |\n", name, r.clients, ps(r.get), fmtSec(r.getCPU.Seconds()), ps(r.log), r.entries, fmtSec(r.logCPU.Seconds()),
				ps(r.busyLog), ps(r.objLog), r.objEntries, fmtSec(r.objLogCPU.Seconds()))
		}
	}
	if len(names) == 2 {
		a, b := results[names[1]], results[names[0]]
		for i := range a {
			fmt.Printf("\n%d clients, %s vs %s: p99 Get %.2fx, Log %.2fx, random object's Log %.2fx; server CPU per Get %.2fx, per Log %.2fx, per random object's Log %.2fx (above 1x %s is better)", a[i].clients, names[0], names[1],
				a[i].get.p99().Seconds()/b[i].get.p99().Seconds(), a[i].log.p99().Seconds()/b[i].log.p99().Seconds(), a[i].objLog.p99().Seconds()/b[i].objLog.p99().Seconds(),
				a[i].getCPU.Seconds()/b[i].getCPU.Seconds(), a[i].logCPU.Seconds()/b[i].logCPU.Seconds(), a[i].objLogCPU.Seconds()/b[i].objLogCPU.Seconds(), names[0])
		}
		fmt.Println()
	}
	return nil
}

// budgetRow is one checkpoint of the budgeted growth run.
type budgetRow struct {
	revs              int64
	fill              time.Duration
	upd, get          opStats
	db, wal           int64 // the data directory's files, at the checkpoint
	live, history     int64 // the live state's keys and values; the log's (Top's total)
	rss               int64 // the server's VmRSS at the checkpoint
	peakFile, peakRSS int64 // the largest seen while filling up to it
	load              string
}

// runGrowthBudget is the growth run through retention by size and by
// time ("months in minutes", issue 40): one server keeping at most budget
// bytes of history (--retain-bytes) for at most window (--retain), filled
// to each checkpoint, where updates and gets are timed (the better p99 of
// two passes) and the data directory's files, the live state, the log's
// bytes and the server's RSS are read; the file's and the RSS's peaks are
// sampled while filling. The report checks the file against the budget
// plus the live state plus 20%, RSS past the second checkpoint against
// the second's plus 10%, and the last update and get p99 against the
// first's plus 10%.
func runGrowthBudget(ctx context.Context, bin, workDir string, cfg config, checkpoints []int, budget, window string, rate float64, extra []string) error {
	budgetBytes, err := mvcc.ParseSize(budget)
	if err != nil {
		return err
	}
	dir := filepath.Join(workDir, "growth-budget")
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	srv, err := startGrowthServer(ctx, bin, dir, append([]string{"--retain", window, "--retain-bytes", budget}, extra...)...)
	if err != nil {
		return err
	}
	defer srv.stop()
	conns := srv.conns
	val := strings.Repeat("v", cfg.valueSize)
	if err := fill(ctx, conns, cfg, growthListPrefix, 500, val); err != nil {
		return err
	}
	const clients = 16
	cs := conns[:clients]
	files := func() (db, wal int64) {
		for name, n := range map[string]*int64{"state.db": &db, "state.db-wal": &wal} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err == nil {
				*n = fi.Size()
			}
		}
		return db, wal
	}
	var rows []budgetRow
	i, rev := 0, int64(501)
	for _, cp := range checkpoints {
		r := budgetRow{}
		t0 := time.Now()
		var peakFile, peakRSS atomic.Int64
		sctx, stopSampling := context.WithCancel(ctx)
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			for {
				db, wal := files()
				if m, err := readMemory(srv.pid); err == nil && m.rss > peakRSS.Load() {
					peakRSS.Store(m.rss)
				}
				if db+wal > peakFile.Load() {
					peakFile.Store(db + wal)
				}
				select {
				case <-sctx.Done():
					return
				case <-t.C:
				}
			}
		}()
		// Fill in steps, so that a step's revision count is exact whatever
		// the measurements in between added.
		for need := int64(cp) - rev; need > 0 && ctx.Err() == nil; need = int64(cp) - rev {
			if err := growthFillPaced(ctx, conns, cfg, i, int(need), val, rate); err != nil {
				stopSampling()
				return fmt.Errorf("fill to %d: %w", cp, err)
			}
			i += int(need)
			rev = growthRev(ctx, conns[0], cfg)
		}
		stopSampling()
		<-sampled
		r.fill, r.peakFile, r.peakRSS = time.Since(t0), peakFile.Load(), peakRSS.Load()
		r.revs = rev
		logf("growth-budget: %d revisions in %v (load %s)", r.revs, r.fill.Round(time.Second), loadAvg())
		for round := 0; round < 2; round++ {
			upd := drive(ctx, cs, clients, 3000, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
				k := growthObj(j * growthStride)
				g, err := c.Get(ctx, k)
				if err != nil {
					return err
				}
				var mod int64
				if len(g.Kvs) == 1 {
					mod = g.Kvs[0].ModRevision
				}
				_, err = c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", mod)).Then(clientv3.OpPut(k, val)).Else(clientv3.OpGet(k)).Commit()
				return err
			})
			get := drive(ctx, cs, clients, 5000, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
				_, err := c.Get(ctx, growthObj(j*7))
				return err
			})
			for _, s := range []opStats{upd, get} {
				if s.errs > 0 {
					logf("growth-budget: %d errors: %s", s.errs, s.firstErr)
				}
			}
			r.upd, r.get = betterP99(r.upd, upd), betterP99(r.get, get)
		}
		rev = growthRev(ctx, conns[0], cfg)
		r.db, r.wal = files()
		r.live = liveBytes(ctx, conns[0], cfg)
		r.history = logBytes(ctx, conns[0], cfg)
		if m, err := readMemory(srv.pid); err == nil {
			r.rss = m.rss
		}
		r.load = loadAvg()
		logf("growth-budget: database %s + WAL %s, live %s, log %s, RSS %s; update p99 %v, get p99 %v",
			fmtMB(r.db), fmtMB(r.wal), fmtMB(r.live), fmtMB(r.history), fmtMB(r.rss), r.upd.p99(), r.get.p99())
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return ctx.Err()
	}

	fmt.Printf("\n### Growth through retention: QuantyKube (SQLite), --retain %s --retain-bytes %s %s, filled at %.0f Puts/s (0: flat out), %d clients, %d-byte values, better p99 of 2 per checkpoint\n\n", window, budget, strings.Join(extra, " "), rate, clients, cfg.valueSize)
	fmt.Println("| revisions | fill time | update txn p50 / p99 | get p50 / p99 | database + WAL | peak while filling | live state | log (Top) | bound: (budget + live) x 1.2 | RSS | peak RSS while filling | load |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	ps := func(s opStats) string { return fmtSec(s.p50().Seconds()) + " / " + fmtSec(s.p99().Seconds()) }
	bound := func(r budgetRow) int64 { return (budgetBytes + r.live) * 12 / 10 }
	for _, r := range rows {
		fmt.Printf("| %d | %v | %s | %s | %s + %s | %s | %s | %s | %s | %s | %s | %s |\n", r.revs, r.fill.Round(time.Second), ps(r.upd), ps(r.get),
			fmtMB(r.db), fmtMB(r.wal), fmtMB(r.peakFile), fmtMB(r.live), fmtMB(r.history), fmtMB(bound(r)), fmtMB(r.rss), fmtMB(r.peakRSS), r.load)
	}
	a, z := rows[0], rows[len(rows)-1]
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	ratio := func(x, y opStats) float64 { return y.p99().Seconds() / max(x.p99().Seconds(), 1e-9) }
	fmt.Printf("\nAt %d against %d revisions: update p99 %.2fx, get p99 %.2fx (target 1.10x or less: %s)\n", z.revs, a.revs,
		ratio(a.upd, z.upd), ratio(a.get, z.get), verdict(ratio(a.upd, z.upd) <= 1.1 && ratio(a.get, z.get) <= 1.1))
	var worst int64
	for _, r := range rows {
		worst = max(worst, r.peakFile, r.db+r.wal)
	}
	fmt.Printf("File: largest %s (database + WAL, at checkpoints and sampled while filling) against a bound of %s (target: within it: %s)\n",
		fmtMB(worst), fmtMB(bound(z)), verdict(worst <= bound(z)))
	if len(rows) >= 3 {
		b := rows[1]
		var peak int64
		for _, r := range rows[1:] {
			peak = max(peak, r.rss, r.peakRSS)
		}
		fmt.Printf("RSS: %s at %d revisions, %s at %d, at most %s in between (target: within 10%% of the second checkpoint's: %s)\n",
			fmtMB(b.rss), b.revs, fmtMB(z.rss), z.revs, fmtMB(peak), verdict(float64(peak) <= 1.1*float64(b.rss)))
	}
	return nil
}

// growthRev is the store's revision now (0 if unreadable).
func growthRev(ctx context.Context, c *clientv3.Client, cfg config) int64 {
	cctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
	defer cancel()
	r, err := c.Get(cctx, "/registry/growth/none")
	if err != nil {
		return 0
	}
	return r.Header.Revision
}

// liveBytes is the live state's keys and values, read in pages (0 if
// unreadable).
func liveBytes(ctx context.Context, c *clientv3.Client, cfg config) int64 {
	var n int64
	from := "\x00"
	for page := 0; page < 10_000; page++ {
		cctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
		r, err := c.Get(cctx, from, clientv3.WithFromKey(), clientv3.WithLimit(1000))
		cancel()
		if err != nil {
			return 0
		}
		for _, kv := range r.Kvs {
			n += int64(len(kv.Key) + len(kv.Value))
		}
		if !r.More || len(r.Kvs) == 0 {
			break
		}
		from = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
	return n
}

// logBytes is the keys and values the log holds, live rows included:
// History's Top total (0 if unreadable).
func logBytes(ctx context.Context, c *clientv3.Client, cfg config) int64 {
	cctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
	defer cancel()
	r, err := historypb.NewHistoryClient(c.ActiveConnection()).Top(cctx, &historypb.TopRequest{Limit: 1})
	if err != nil || r.Total == nil {
		return 0
	}
	return r.Total.Bytes
}
