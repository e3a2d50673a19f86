package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// growthServer is one QuantyKube process on the growth data directory.
type growthServer struct {
	endpoint string
	conns    []*clientv3.Client
	stop     func()
}

func startGrowthServer(ctx context.Context, bin, dir string, extra ...string) (*growthServer, error) {
	srv, conns, err := launchDialled(ctx, quantykubeTarget("quantykube", bin, nil, extra), dir, "")
	if err != nil {
		return nil, err
	}
	return &growthServer{endpoint: srv.endpoint, conns: conns, stop: srv.stop}, nil
}

// runGrowth measures QuantyKube as retained history grows: one server
// keeping everything (--retain 0), filled with updates to checkpoints of
// retained revisions (10^4, then 10^6), measured twice at each (the better
// p99 counts). At each checkpoint also quantykube.History: Get at a time,
// and Log of one key with (at the last checkpoint) about 1,000 revisions.
// Last, the server restarts with a 75 s retention window so that pruning
// removes nearly all of that history while updates are measured.
func runGrowth(ctx context.Context, bin, workDir string, cfg config, checkpoints []int) error {
	dir := filepath.Join(workDir, "growth")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startGrowthServer(ctx, bin, dir, "--retain", "0")
	if err != nil {
		return err
	}
	defer func() { srv.stop() }()
	conns := srv.conns
	val := strings.Repeat("v", cfg.valueSize)
	const objects = 5000
	obj := func(i int) string { return fmt.Sprintf("/registry/growth/obj/k%06d", i%objects) }
	const listPrefix = "/registry/growth/list/"
	const hot = "/registry/growth/hot"
	if err := fill(ctx, conns, cfg, listPrefix, 500, val); err != nil {
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
	keep := func(a, b opStats) opStats {
		if a.ops == 0 || (b.ops > 0 && b.p99() < a.p99()) {
			return b
		}
		return a
	}
	const clients = 16
	measureUpdates := func(cs []*clientv3.Client, n int, d time.Duration) opStats {
		return drive(ctx, cs, clients, n, d, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
			k := obj(j)
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
	i := 0
	for _, cp := range checkpoints {
		// Fill: plain Puts cycling over the objects; one in eleven goes to
		// the listed keys and one in 997 to the hot key, which so reaches
		// about 1,000 revisions at 10^6.
		need := cp - int(rev(conns[0]))
		t0 := time.Now()
		if need > 0 {
			start := i
			st := drive(ctx, conns, 64, need, 2*time.Hour, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
				n := start + j
				k := obj(n)
				switch {
				case n%997 == 0:
					k = hot
				case n%11 == 0:
					k = fmt.Sprintf("%sk%06d", listPrefix, n%500)
				}
				_, err := c.Put(ctx, k, val)
				return err
			})
			i += need
			if st.errs > 0 {
				return fmt.Errorf("fill to %d: %d errors (%s)", cp, st.errs, st.firstErr)
			}
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
				_, err := c.Get(ctx, obj(j*7))
				return err
			})
			list := drive(ctx, cs, clients, 200, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
				_, err := c.Get(ctx, listPrefix, clientv3.WithPrefix(), clientv3.WithLimit(500))
				return err
			})
			// A page of a paged list pinned 1,000 revisions back.
			past := drive(ctx, cs, clients, 200, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
				_, err := c.Get(ctx, listPrefix, clientv3.WithPrefix(), clientv3.WithLimit(500), clientv3.WithRev(cur-1000))
				return err
			})
			// History Get at a random time since the fill began.
			now := time.Now().UnixMilli()
			hGet := drive(ctx, cs, clients, 2000, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
				at := fillStart + rand.Int64N(max(now-fillStart, 1))
				_, err := historypb.NewHistoryClient(c.ActiveConnection()).Get(ctx, &historypb.Request{Key: []byte(obj(j * 13)), UnixMs: at})
				return err
			})
			// History Log of the hot key: one page of up to 1,000 entries.
			var entries int
			hLog := drive(ctx, cs[:1], 1, 50, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
				resp, err := historypb.NewHistoryClient(c.ActiveConnection()).Log(ctx, &historypb.Request{Key: []byte(hot), Limit: 1000})
				if err == nil {
					entries = len(resp.Entries)
				}
				return err
			})
			r.upd, r.get, r.list, r.listPast = keep(r.upd, upd), keep(r.get, get), keep(r.list, list), keep(r.listPast, past)
			r.hGet, r.hLog, r.logEntries = keep(r.hGet, hGet), keep(r.hLog, hLog), entries
			for _, s := range []opStats{upd, get, list, past, hGet, hLog} {
				if s.errs > 0 {
					logf("growth: %d errors: %s", s.errs, s.firstErr)
				}
			}
		}
		r.size = dirSize(dir)
		rows = append(rows, r)
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
	last := rows[len(rows)-1]
	fmt.Printf("\nUpdates while retention pruning runs (restarted with --retain 75s --prune-interval 1s; first %v window): p50 %s, p99 %s, %.0f/s; without pruning at %d revisions: p50 %s, p99 %s. Oldest retained revision %d before, %d after %v; database %s before, %s after (SQLite reuses freed pages; the file does not shrink without defragment).\n",
		cfg.phaseTime, fmtSec(pruning.p50().Seconds()), fmtSec(pruning.p99().Seconds()), pruning.rate(), last.revs,
		fmtSec(last.upd.p50().Seconds()), fmtSec(last.upd.p99().Seconds()), before, after, time.Since(pruneStart).Round(time.Second), fmtMB(last.size), fmtMB(sizeAfter))
	return nil
}
