package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The start-up workload: a server is loaded with many live keys, each
// written several times (the history a restart finds), stopped, and
// started again on the same data, more than once; what counts is the
// time from the process's start to its first successful Range.

const startupPrefix = "/registry/bench-startup/"

type startupResult struct {
	revision  int64
	load      time.Duration
	dataBytes int64
	starts    []time.Duration
	rss       int64 // right after the fastest start
	counted   int64 // the prefix's count after the last start
}

func (r *startupResult) fastest() time.Duration {
	var b time.Duration
	for _, s := range r.starts {
		if b == 0 || s < b {
			b = s
		}
	}
	return b
}

func runStartup(ctx context.Context, t target, fr *fresh, ec extraConfig, restarts int) (*startupResult, error) {
	res := &startupResult{}
	srv, conns, err := launchDialled(ctx, t, fr.dir, fr.db)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	key := func(i int) string { return fmt.Sprintf("%sk%07d", startupPrefix, i) }
	for v := 0; v < ec.startVersions && err == nil; v++ {
		val := strings.Repeat(string(rune('a'+v%26)), ec.startValue)
		err = loadKeys(ctx, conns, ec.startKeys, key, val, ec.reqTimeout)
		logf("    version %d of %d: %d keys loaded after %v", v+1, ec.startVersions, ec.startKeys, time.Since(t0).Round(time.Second))
	}
	if err == nil {
		gctx, cancel := context.WithTimeout(ctx, ec.reqTimeout)
		var g *clientv3.GetResponse
		if g, err = conns[0].Get(gctx, "/bench-none"); err == nil {
			res.revision = g.Header.Revision
		}
		cancel()
	}
	res.load = time.Since(t0)
	srv.stop()
	if err != nil {
		return nil, err
	}
	res.dataBytes = dirSize(fr.dir)

	for r := 0; r < restarts; r++ {
		srv, err := launch(ctx, t, fr.dir, fr.db)
		if err != nil {
			return nil, fmt.Errorf("restart %d: %w", r+1, err)
		}
		logf("    restart %d: first Range answered %v after the process started", r+1, srv.took.Round(time.Millisecond))
		if m, err := readMemory(srv.pid); err == nil && (len(res.starts) == 0 || srv.took < res.fastest()) {
			res.rss = m.rss
		}
		res.starts = append(res.starts, srv.took)
		c, err := newClient(srv.endpoint)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*ec.reqTimeout)
			var g *clientv3.GetResponse
			if g, err = c.Get(cctx, startupPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
				res.counted = g.Count
			}
			cancel()
			c.Close()
		}
		srv.stop()
		if err != nil {
			return nil, fmt.Errorf("restart %d: count: %w", r+1, err)
		}
	}
	return res, nil
}

func printStartup(w io.Writer, runs []*extraRun[*startupResult], ec extraConfig, restarts int) {
	fmt.Fprintf(w, "%d live keys, each written %d times (%d-byte values) through the etcd API in transactions of %d puts; the server stopped and started %d times on that data. Start = from the process's start to its first successful Range (a get of one key); the best of the starts counts.\n\n",
		ec.startKeys, ec.startVersions, ec.startValue, putChunk, restarts)
	fmt.Fprintln(w, "| target | revision | data on disk | loaded in | start (each) | best start | RSS after start | keys counted after start |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	best := func(r *startupResult) float64 { return r.fastest().Seconds() }
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		x := r.rounds[0]
		var each []string
		for _, s := range x.starts {
			each = append(each, fmtSec(s.Seconds()))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %d |\n", r.t.name, x.revision, fmtMB(x.dataBytes), fmtSec(x.load.Seconds()),
			strings.Join(each, ", "), fmtSec(best(x)), fmtMB(x.rss), x.counted)
	}
	printNotes(w, runs)
	printRatios(w, runs, []ratioCol[*startupResult]{{"best start", best, false}})
}
