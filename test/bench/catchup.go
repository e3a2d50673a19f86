package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The catch-up workload: a watch (prev_kv) that starts far behind, on
// large values, as kube-apiserver's watch cache does when it restarts and
// re-watches from the revision it had: -catchup-revisions puts of
// -catchup-value-size bytes to 16 keys, then one watch from before them.
// It starts behind QuantyKube's event ring, so most of what it is owed
// comes from the log; etcd reads it from bbolt. The watcher is clientv3,
// as kube-apiserver's is, and decodes what it receives.

const catchupPrefix = "/registry/bench-catchup/"

// catchupKeys is how many keys the puts go to: each put after a key's
// first is an update, whose event carries the value before it.
const catchupKeys = 16

type catchupResult struct {
	want, delivered int64
	wrong           int64         // events out of revision order, with the wrong prev_kv, or with a value of the wrong size
	took            time.Duration // from the watch's start to its last event
	serverCPU       time.Duration // with a PostgreSQL target's cluster
	mem             memory        // peak from the watch's start to its end, and RSS then
}

func (r *catchupResult) String() string {
	return fmt.Sprintf("last event after %.2f s, server CPU %.2f s, peak RSS %s, %d of %d events, %d wrong",
		r.took.Seconds(), r.serverCPU.Seconds(), fmtMB(r.mem.hwm), r.delivered, r.want, r.wrong)
}

// dbPID is the target's PostgreSQL postmaster, 0 for none.
func runCatchup(ctx context.Context, srv *server, dbPID int, ec extraConfig) (*catchupResult, error) {
	conns, err := dialConns(srv.endpoint, catchupKeys)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	first, err := conns[0].Put(ctx, catchupPrefix+"start", "")
	if err != nil {
		return nil, err
	}
	val := strings.Repeat("v", ec.catchupValueSize)
	puts := drive(ctx, conns, catchupKeys, ec.catchupRevisions, 10*time.Minute, ec.reqTimeout, func(ctx context.Context, c *clientv3.Client, i int) error {
		_, err := c.Put(ctx, fmt.Sprintf("%sk%02d", catchupPrefix, i%catchupKeys), val)
		return err
	})
	if puts.errs > 0 || puts.ops != ec.catchupRevisions {
		return nil, fmt.Errorf("catchup: %d of %d puts answered, %d errors (first: %q)", puts.ops, ec.catchupRevisions, puts.errs, puts.firstErr)
	}

	res := &catchupResult{want: int64(ec.catchupRevisions)}
	if err := resetPeak(srv.pid); err != nil {
		return nil, fmt.Errorf("reset the peak RSS: %w", err)
	}
	hooks := phaseHooks{serverPID: srv.pid, dbPID: dbPID}
	srv0, db0, _ := hooks.phaseCPU()
	started := time.Now()
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), ec.catchupWait)
	defer cancel()
	// A fresh client: the puts' connections carried nothing of the watch.
	wc, err := newClient(srv.endpoint)
	if err != nil {
		return nil, err
	}
	defer wc.Close()
	var last int64
	prev := map[string]int64{} // each key's last revision seen
	// A watch that runs out of -catchup-wait ends with the channel closed;
	// what it missed is counted.
	for resp := range wc.Watch(wctx, catchupPrefix+"k", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(first.Header.Revision+1)) {
		if err := resp.Err(); err != nil {
			return nil, fmt.Errorf("catchup: watch: %w", err)
		}
		for _, e := range resp.Events {
			k := string(e.Kv.Key)
			// Each key's first event is its create; every later one
			// carries the key's previous put as its prev_kv.
			want := prev[k]
			var got int64
			if e.PrevKv != nil {
				got = e.PrevKv.ModRevision
				if len(e.PrevKv.Value) != ec.catchupValueSize {
					got = -1
				}
			}
			if e.Kv.ModRevision <= last || got != want || len(e.Kv.Value) != ec.catchupValueSize {
				res.wrong++
			}
			last, prev[k] = e.Kv.ModRevision, e.Kv.ModRevision
			res.delivered++
		}
		if len(resp.Events) > 0 {
			res.took = time.Since(started)
		}
		if res.delivered >= res.want {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	srv1, db1, _ := hooks.phaseCPU()
	res.serverCPU = srv1 - srv0 + db1 - db0
	if res.mem, err = readMemory(srv.pid); err != nil {
		return nil, err
	}
	return res, nil
}

func catchupTook(r *catchupResult) float64    { return r.took.Seconds() }
func catchupCPU(r *catchupResult) float64     { return r.serverCPU.Seconds() }
func catchupPeak(r *catchupResult) float64    { return float64(r.mem.hwm) }
func catchupMissing(r *catchupResult) int64   { return r.want - r.delivered }
func catchupWrong(r *catchupResult) int64     { return r.wrong }
func catchupDelivered(r *catchupResult) int64 { return r.delivered }
func catchupRSS(r *catchupResult) float64     { return float64(r.mem.rss) }

func printCatchup(w io.Writer, runs []*extraRun[*catchupResult], ec extraConfig) {
	fmt.Fprintf(w, "%d puts of %d bytes to %d keys, then one watch (prev_kv, clientv3) from before them: how long until its last event, the server's CPU (with a PostgreSQL target's cluster) and peak RSS (VmHWM, reset at the watch's start) until then, and RSS at the end. Best of the rounds per figure; missing events (within -catchup-wait) and wrong ones (out of revision order, without the prev_kv owed, or a value of the wrong size): worst round.\n\n",
		ec.catchupRevisions, ec.catchupValueSize, catchupKeys)
	fmt.Fprintln(w, "| target | events delivered | missing | wrong | last event after | server CPU | peak RSS | RSS at the end |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %s | %s | %s |\n", r.t.name,
			fewestOf(r.rounds, catchupDelivered), worstOf(r.rounds, catchupMissing), worstOf(r.rounds, catchupWrong),
			fmtSec(bestOf(r.rounds, catchupTook, false)), fmtSec(bestOf(r.rounds, catchupCPU, false)),
			fmtMB(int64(bestOf(r.rounds, catchupPeak, false))), fmtMB(int64(bestOf(r.rounds, catchupRSS, false))))
	}
	printNotes(w, runs)
	printRatios(w, runs, []ratioCol[*catchupResult]{
		{"last event after", catchupTook, false},
		{"server CPU", catchupCPU, false},
		{"peak RSS", catchupPeak, false},
	})
}
