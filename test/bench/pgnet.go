package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The pgnet workload: the PostgreSQL targets reach the throwaway cluster
// through a TCP proxy (toxiproxy, in this process) that delays every chunk
// of bytes by the same latency each way, as a database across a network
// would. What a write costs is then counted in round trips: a batch of
// five statements sent one after another pays five of them, a pipelined
// batch fewer. The proxy also counts the chunks the servers send towards
// PostgreSQL, which at one client is how many request turns a write takes.
// The one-client phase runs first with the proxy adding nothing: what a
// create costs besides the network (the commit's flush to disk, the
// servers' own work) is the difference, so the round trips it waits for are
// (p50 - p50 without latency) / RTT.

// pgnetLatency is the toxic that delays each chunk by a fixed number of
// microseconds (toxiproxy's own latency toxic counts milliseconds, too
// coarse for a network inside a data centre), and counts the chunks. It
// also measures the delay it gave, so that the table shows the distance
// the servers really had (see fineSleeper).
type pgnetLatency struct {
	Micros  int64 `json:"micros"`
	chunks  atomic.Int64
	off     atomic.Bool  // pass chunks on at once
	delayed atomic.Int64 // chunks held back
	held    atomic.Int64 // their time in the toxic, in nanoseconds
}

func (t *pgnetLatency) Pipe(stub *toxics.ToxicStub) {
	delay := time.Duration(t.Micros) * time.Microsecond
	fine, err := newFineSleeper()
	if err != nil {
		logf("pgnet: %v; the proxy's delays fall back to Go's timers, which wait about a millisecond at least", err)
	}
	defer func() {
		if fine != nil {
			fine.close()
		}
	}()
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			t.chunks.Add(1)
			// Measured from when the proxy read the chunk: chunks that queue
			// behind each other are not delayed twice.
			if wait := delay - time.Since(c.Timestamp); wait > 0 && !t.off.Load() {
				if fine != nil {
					if err := fine.sleep(wait); err != nil {
						logf("pgnet: %v; this stream's delays fall back to Go's timers", err)
						fine.close()
						fine = nil
					}
				}
				// What is left of the wait (all of it without a timerfd).
				if left := delay - time.Since(c.Timestamp); left > 0 && fine == nil {
					time.Sleep(left)
				}
				t.delayed.Add(1)
				t.held.Add(int64(time.Since(c.Timestamp)))
			}
			stub.Output <- c
		}
	}
}

// held is how many chunks the proxy delayed so far, both ways, and their
// total time in it.
func (p *pgnetProxy) held() (chunks int64, total time.Duration) {
	for _, t := range p.both {
		chunks += t.delayed.Load()
		total += time.Duration(t.held.Load())
	}
	return chunks, total
}

const pgnetToxic = "quantykube_bench_latency"

func init() { toxics.Register(pgnetToxic, new(pgnetLatency)) }

// pgnetProxy is a proxy to the cluster with the latency on both streams.
type pgnetProxy struct {
	proxy    *toxiproxy.Proxy
	upstream *pgnetLatency
	both     []*pgnetLatency
	port     int
}

// delay turns the latency on or off.
func (p *pgnetProxy) delay(on bool) {
	for _, t := range p.both {
		t.off.Store(!on)
	}
}

func startPGNetProxy(pg *pgCluster, latency time.Duration) (*pgnetProxy, error) {
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(api, "postgres", "127.0.0.1:0", net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.port)))
	if err := proxy.Start(); err != nil {
		return nil, fmt.Errorf("start the proxy: %w", err)
	}
	p := &pgnetProxy{proxy: proxy}
	for _, stream := range []string{"upstream", "downstream"} {
		w, err := proxy.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(`{"type":%q,"stream":%q,"toxicity":1,"attributes":{"micros":%d}}`,
			pgnetToxic, stream, latency.Microseconds())))
		if err != nil {
			proxy.Stop()
			return nil, fmt.Errorf("add the latency (%s): %w", stream, err)
		}
		t := w.Toxic.(*pgnetLatency)
		p.both = append(p.both, t)
		if stream == "upstream" {
			p.upstream = t
		}
	}
	_, port, err := net.SplitHostPort(proxy.Listen)
	if err == nil {
		p.port, err = strconv.Atoi(port)
	}
	if err != nil {
		proxy.Stop()
		return nil, fmt.Errorf("proxy address %q: %w", proxy.Listen, err)
	}
	return p, nil
}

type pgnetResult struct {
	rtt time.Duration
	// oneWay is the mean delay the proxy gave a chunk in the one-client
	// phase with latency: what rtt really was, halved.
	oneWay time.Duration
	// One client, creates one after another, with the latency and without.
	single, near opStats
	turns        float64 // chunks towards PostgreSQL per create
	// Many clients.
	create, update opStats
	errs           int
	lost           int64 // acknowledged creates missing from the prefix count
}

func (r *pgnetResult) p50RTTs() float64 {
	return float64(r.single.p50()) / float64(r.rtt)
}

// netRTTs is the round trips the network added to the median create.
func (r *pgnetResult) netRTTs() float64 {
	return float64(r.single.p50()-r.near.p50()) / float64(r.rtt)
}

func pgnetOnly(t target) string {
	if t.on == nil {
		return "runs on PostgreSQL only"
	}
	return ""
}

// runPGNet measures t (a PostgreSQL target) through a proxy to pg.
func runPGNet(ctx context.Context, t target, fr *fresh, pg *pgCluster, ec extraConfig) (*pgnetResult, error) {
	px, err := startPGNetProxy(pg, ec.netLatency)
	if err != nil {
		return nil, err
	}
	defer px.proxy.Stop()
	far := *pg
	far.port = px.port
	return withServer(ctx, t.on(&far), fr, func(srv *server) (*pgnetResult, error) {
		conns, err := dialConns(srv.endpoint, 16)
		if err != nil {
			return nil, err
		}
		defer closeAll(conns)
		res := &pgnetResult{rtt: 2 * ec.netLatency}
		val := strings.Repeat("v", ec.valueSize)
		// The table's shapes: create is If(mod_revision = 0) Then Put,
		// update If(mod_revision = R) Then Put Else Get.
		key := func(prefix string, i int) string { return fmt.Sprintf("%sk%06d", prefix, i) }
		revs := make([]atomic.Int64, max(ec.netSingle, ec.netKeys))
		create := func(prefix string) func(ctx context.Context, c *clientv3.Client, i int) error {
			return func(ctx context.Context, c *clientv3.Client, i int) error {
				k := key(prefix, i)
				resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, val)).Commit()
				if err == nil && !resp.Succeeded {
					err = fmt.Errorf("create %s: the key exists", k)
				}
				if err == nil {
					revs[i].Store(resp.Header.Revision)
				}
				return err
			}
		}
		logPhase := func(label string, st opStats) {
			logf("    %-10s %6d ops %8.0f/s p50 %-9v p99 %-9v errors %d %s", label, st.ops, st.rate(), st.p50().Round(10*time.Microsecond), st.p99().Round(10*time.Microsecond), st.errs, st.firstErr)
		}

		px.delay(false)
		res.near = drive(ctx, conns[:1], 1, ec.netSingle, ec.netTime, ec.reqTimeout, create("/registry/bench-pgnet-0/"))
		logPhase("create-c1 (no latency)", res.near)
		px.delay(true)
		before := px.upstream.chunks.Load()
		heldN, heldT := px.held()
		res.single = drive(ctx, conns[:1], 1, ec.netSingle, ec.netTime, ec.reqTimeout, create("/registry/bench-pgnet-1/"))
		if res.single.ops > 0 {
			res.turns = float64(px.upstream.chunks.Load()-before) / float64(res.single.ops)
		}
		if n, t := px.held(); n > heldN {
			res.oneWay = (t - heldT) / time.Duration(n-heldN)
		}
		logPhase("create-c1", res.single)

		prefix := fmt.Sprintf("/registry/bench-pgnet-%d/", ec.netClients)
		clear(revs)
		res.create = drive(ctx, conns, ec.netClients, ec.netKeys, ec.netTime, ec.reqTimeout, create(prefix))
		logPhase(fmt.Sprintf("create-c%d", ec.netClients), res.create)
		var acked []int
		for i := range ec.netKeys {
			if revs[i].Load() > 0 {
				acked = append(acked, i)
			}
		}
		res.update = drive(ctx, conns, ec.netClients, len(acked), ec.netTime, ec.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
			i := acked[j]
			k := key(prefix, i)
			resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", revs[i].Load())).
				Then(clientv3.OpPut(k, val)).Else(clientv3.OpGet(k)).Commit()
			if err == nil && !resp.Succeeded {
				err = fmt.Errorf("update %s: its revision changed", k)
			}
			return err
		})
		logPhase(fmt.Sprintf("update-c%d", ec.netClients), res.update)
		res.errs = res.near.errs + res.single.errs + res.create.errs + res.update.errs

		cctx, cancel := context.WithTimeout(ctx, ec.reqTimeout)
		defer cancel()
		g, err := conns[0].Get(cctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, fmt.Errorf("count the created keys: %w", err)
		}
		// A create that failed may still have committed (its answer was
		// lost), so only fewer keys than acknowledged is a loss.
		res.lost = max(0, int64(len(acked))-g.Count)
		return res, nil
	})
}

func printPGNet(w io.Writer, runs []*extraRun[*pgnetResult], ec extraConfig) {
	fmt.Fprintf(w, "The servers reach PostgreSQL through a proxy adding %v each way (round trip %v). One client: %d creates (If mod_revision = 0 Then Put, %d B) one after another, first with the proxy adding nothing (\"no latency\"), then with the latency; then %d clients: %d creates, then an update (If mod_revision = R Then Put Else Get) of each created key. Turns: chunks the server sent towards PostgreSQL per one-client create, every connection counted. Best of the rounds.\n\n",
		ec.netLatency, 2*ec.netLatency, ec.netSingle, ec.valueSize, ec.netClients, ec.netKeys)
	fmt.Fprintf(w, "| target | delay each way, measured | 1 client create p50 | p99 | p50 in round trips | p50 no latency | round trips added | turns per create | %d clients create/s | update/s | errors | lost |\n", ec.netClients)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	p50 := func(r *pgnetResult) float64 { return r.single.p50().Seconds() }
	p99 := func(r *pgnetResult) float64 { return r.single.p99().Seconds() }
	rtts := func(r *pgnetResult) float64 { return r.p50RTTs() }
	near := func(r *pgnetResult) float64 { return r.near.p50().Seconds() }
	added := func(r *pgnetResult) float64 { return r.netRTTs() }
	turns := func(r *pgnetResult) float64 { return r.turns }
	creates := func(r *pgnetResult) float64 { return r.create.rate() }
	updates := func(r *pgnetResult) float64 { return r.update.rate() }
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		errs := worstOf(r.rounds, func(r *pgnetResult) int64 { return int64(r.errs) })
		lost := worstOf(r.rounds, func(r *pgnetResult) int64 { return r.lost })
		// The shortest of the rounds: every round, whichever gave a figure
		// beside it, had at least this distance.
		oneWay := r.rounds[0].oneWay
		for _, rr := range r.rounds {
			oneWay = min(oneWay, rr.oneWay)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f | %s | %.1f | %.1f | %s | %s | %d | %d |\n", r.t.name,
			fmtSec(oneWay.Seconds()), fmtSec(bestOf(r.rounds, p50, false)), fmtSec(bestOf(r.rounds, p99, false)), bestOf(r.rounds, rtts, false),
			fmtSec(bestOf(r.rounds, near, false)), bestOf(r.rounds, added, false), bestOf(r.rounds, turns, false), fmtRate(bestOf(r.rounds, creates, true)), fmtRate(bestOf(r.rounds, updates, true)), errs, lost)
	}
	printNotes(w, runs)
	printRatios(w, runs, []ratioCol[*pgnetResult]{
		{"1 client create p50", p50, false},
		{fmt.Sprintf("%d clients create/s", ec.netClients), creates, true},
		{"update/s", updates, true},
	})
}
