package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// runGrowth measures QuantyKube's write and read latency as retained
// history grows: one server, filled with updates to checkpoints of
// retained revisions (10^4, then 10^6), measured twice at each.
//
// TODO(history): when quantykube.History lands, add here History Get at a
// time and Log of one key with 1,000 revisions at 10^6 retained revisions,
// and write latency while retention pruning runs (issue 5).
func runGrowth(ctx context.Context, bin, workDir string, cfg config, checkpoints []int) error {
	dir := filepath.Join(workDir, "growth")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port, err := freePort()
	if err != nil {
		return err
	}
	t := quantykubeTarget(bin, nil)
	cmd, err := t.start(ctx, dir, "", port)
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitReady(ctx, endpoint, cmd, exited); err != nil {
		return err
	}
	conns, err := dialConns(endpoint, 16)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	val := strings.Repeat("v", cfg.valueSize)
	const objects = 5000
	obj := func(i int) string { return fmt.Sprintf("/registry/growth/obj/k%06d", i%objects) }
	const listPrefix = "/registry/growth/list/"
	if err := fill(ctx, conns, cfg, listPrefix, 500, val); err != nil {
		return err
	}

	type row struct {
		revs                     int64
		size                     int64
		upd, get, list, listPast opStats
		fillRate                 float64
	}
	var rows []row
	rev := func() int64 {
		c, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
		defer cancel()
		r, err := conns[0].Get(c, "/registry/growth/none")
		if err != nil {
			return 0
		}
		return r.Header.Revision
	}
	i := 0
	for _, cp := range checkpoints {
		// Fill: plain Puts cycling over the objects (and, one in eleven,
		// the listed keys), until the store holds cp revisions.
		need := cp - int(rev())
		t0 := time.Now()
		if need > 0 {
			start := i
			st := drive(ctx, conns, 64, need, 2*time.Hour, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
				k := obj(start + j)
				if (start+j)%11 == 0 {
					k = fmt.Sprintf("%sk%06d", listPrefix, (start+j)%500)
				}
				_, err := c.Put(ctx, k, val)
				return err
			})
			i += need
			if st.errs > 0 {
				return fmt.Errorf("fill to %d: %d errors (%s)", cp, st.errs, st.firstErr)
			}
		}
		r := row{revs: rev()}
		if need > 0 {
			r.fillRate = float64(need) / time.Since(t0).Seconds()
		}
		logf("growth: %d revisions (filled at %.0f/s)", r.revs, r.fillRate)
		for round := 0; round < 2; round++ {
			const clients = 16
			cs := conns[:clients]
			cur := rev()
			upd := drive(ctx, cs, clients, 3000, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
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
			keep := func(a, b opStats) opStats {
				if a.ops == 0 || (b.ops > 0 && b.p99() < a.p99()) {
					return b
				}
				return a
			}
			r.upd, r.get, r.list, r.listPast = keep(r.upd, upd), keep(r.get, get), keep(r.list, list), keep(r.listPast, past)
			for _, s := range []opStats{upd, get, list, past} {
				if s.errs > 0 {
					logf("growth: %d errors: %s", s.errs, s.firstErr)
				}
			}
		}
		r.size = dirSize(dir)
		rows = append(rows, r)
	}

	fmt.Printf("\n### Growth: QuantyKube (SQLite), 16 clients, %d-byte values, best of 2 per checkpoint\n\n", cfg.valueSize)
	fmt.Println("| retained revisions | update txn p50 / p99 | get p50 / p99 | list 500 p50 / p99 | list 500 at rev-1000 p50 / p99 | database | bytes per revision |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s / %s | %s / %s | %s / %s | %s / %s | %s | %.0f |\n", r.revs,
			fmtSec(r.upd.p50().Seconds()), fmtSec(r.upd.p99().Seconds()),
			fmtSec(r.get.p50().Seconds()), fmtSec(r.get.p99().Seconds()),
			fmtSec(r.list.p50().Seconds()), fmtSec(r.list.p99().Seconds()),
			fmtSec(r.listPast.p50().Seconds()), fmtSec(r.listPast.p99().Seconds()),
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
	fmt.Println("\nTODO(history): History Get at a time, Log of one key, and write latency under retention pruning wait for quantykube.History.")
	return nil
}
