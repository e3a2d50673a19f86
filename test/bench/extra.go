package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The workloads beside the table (issue 14): watch fan-out, a big
// DeleteRange under load, an idle server, start-up with many keys, and
// PostgreSQL across a network (pgnet). Each
// runs against every target that can run it, on fresh data, -rounds times;
// each is printed as its own table with the ratios against etcd (and kine
// where kine ran it) from the same run.

// extraConfig sizes those workloads; -quick takes the small sizes for any
// size not set on the command line.
type extraConfig struct {
	valueSize  int
	reqTimeout time.Duration

	fanWatchers, fanConns, fanPuts int
	fanWait                        time.Duration // bound on delivery after the first put

	delKeys, delClients int

	idleTime              time.Duration
	idleKeys, idleWatches int
	idleAPIServer         string        // kube-apiserver binary: the idle client instead of the harness's
	idleSettle            time.Duration // from kube-apiserver's /readyz to the window

	startKeys, startVersions, startValue int

	netLatency                     time.Duration // one way
	netSingle, netClients, netKeys int
	netTime                        time.Duration // bound on each phase

	mixedClients, mixedKeys int
	mixedTime               time.Duration
	mixedGetRate            int // gets per second in all; 0: as many as the clients can

	watchersStreams, watchersClients, watchersKeys int
	watchersTime, watchersWait                     time.Duration

	catchupRevisions, catchupValueSize int
	catchupWait                        time.Duration

	steady      steadyConfig
	steadyRates string // -steady-rates, parsed into steady.rates by check

	scale   scaleConfig
	tenants tenantsConfig
}

// extraFlags registers the workloads' flags and returns a function that
// applies -quick once flag.Parse has run.
func extraFlags(ec *extraConfig) func() {
	flag.IntVar(&ec.fanWatchers, "fanout-watchers", 5000, "fanout: watchers of one prefix")
	flag.IntVar(&ec.fanConns, "fanout-conns", 10, "fanout: connections (one Watch stream each) the watchers share")
	flag.IntVar(&ec.fanPuts, "fanout-puts", 2000, "fanout: sequential puts under the prefix")
	flag.DurationVar(&ec.fanWait, "fanout-wait", 5*time.Minute, "fanout: bound on delivering every event, from the first put")
	flag.IntVar(&ec.delKeys, "bigdelete-keys", 200_000, "bigdelete: keys the one DeleteRange removes")
	flag.IntVar(&ec.delClients, "bigdelete-clients", 8, "bigdelete: writers, and as many readers, running during the delete")
	flag.DurationVar(&ec.idleTime, "idle-time", 2*time.Minute, "idle: the measured window (with -idle-apiserver: 10m, -quick 1m)")
	flag.StringVar(&ec.idleAPIServer, "idle-apiserver", "", "idle: this kube-apiserver binary is the only client of each target, instead of the harness's keys, watches and lease (scripts/bench.sh passes the one scripts/kubernetes.sh built, if any); scale: the kube-apiserver it starts")
	flag.DurationVar(&ec.idleSettle, "idle-settle", time.Minute, "idle with -idle-apiserver: wait after kube-apiserver is ready before the window (-quick 30s)")
	flag.IntVar(&ec.startKeys, "startup-keys", 1_000_000, "startup: live keys")
	flag.IntVar(&ec.startVersions, "startup-versions", 3, "startup: revisions written per key (the history a restart finds)")
	flag.IntVar(&ec.startValue, "startup-value-size", 256, "startup: value bytes")
	flag.DurationVar(&ec.netLatency, "pgnet-latency", 500*time.Microsecond, "pgnet: latency the proxy adds each way between the servers and PostgreSQL")
	flag.IntVar(&ec.netSingle, "pgnet-single", 2000, "pgnet: creates by one client")
	flag.IntVar(&ec.netClients, "pgnet-clients", 64, "pgnet: clients of the concurrent phases")
	flag.IntVar(&ec.netKeys, "pgnet-keys", 10_000, "pgnet: creates (then updates) by those clients")
	flag.DurationVar(&ec.netTime, "pgnet-phase-time", 30*time.Second, "pgnet: upper bound on each phase")
	flag.IntVar(&ec.mixedClients, "mixed-clients", 32, "mixed: clients putting, and as many getting, at once")
	flag.IntVar(&ec.mixedKeys, "mixed-keys", 2000, "mixed: keys the puts and gets spread over")
	flag.DurationVar(&ec.mixedTime, "mixed-time", 15*time.Second, "mixed: the measured window (-quick 5s)")
	flag.IntVar(&ec.mixedGetRate, "mixed-get-rate", 0, "mixed: gets per second the getting clients send in all, at most: fewer when the server falls behind (0: each sends its next get as soon as the last is answered)")
	flag.IntVar(&ec.watchersStreams, "watchers-streams", 100, "watchers: clients with one watch each (one connection and Watch stream each)")
	flag.IntVar(&ec.watchersClients, "watchers-clients", 64, "watchers: clients putting under the watched prefixes")
	flag.IntVar(&ec.watchersKeys, "watchers-keys", 20_000, "watchers: keys the puts update")
	flag.DurationVar(&ec.watchersTime, "watchers-time", 15*time.Second, "watchers: how long the puts run (-quick 5s)")
	flag.DurationVar(&ec.watchersWait, "watchers-wait", time.Minute, "watchers: bound on delivering every event, from the last put")
	flag.IntVar(&ec.catchupRevisions, "catchup-revisions", 2000, "catchup: puts (one revision each) the watch starts before (-quick 500)")
	flag.IntVar(&ec.catchupValueSize, "catchup-value-size", 64<<10, "catchup: bytes per value")
	flag.DurationVar(&ec.catchupWait, "catchup-wait", time.Minute, "catchup: bound on delivering every event, from the watch's start")
	flag.StringVar(&ec.steadyRates, "steady-rates", "50,500", "steady: updates per second, one measured window each")
	flag.IntVar(&ec.steady.keys, "steady-keys", 2000, "steady: keys the updates go round")
	flag.IntVar(&ec.steady.valueSize, "steady-value-size", 2048, "steady: value bytes")
	flag.DurationVar(&ec.steady.warmup, "steady-warmup", 10*time.Second, "steady: updates at the rate before each window, not measured (-quick 3s)")
	flag.DurationVar(&ec.steady.window, "steady-time", time.Minute, "steady: the measured window per rate (-quick 10s)")
	flag.BoolVar(&ec.steady.watch, "steady-watch", false, "steady: then each rate again with a watch on the prefix (prev_kv, progress notify), as kube-apiserver's watch cache")
	flag.StringVar(&ec.steady.pprof, "steady-pprof", "", "steady: the --pprof-address given to QuantyKube in -quantykube-flags; a CPU profile of each of its windows goes into -steady-pprof-dir")
	flag.StringVar(&ec.steady.pprofDir, "steady-pprof-dir", ".cache/bench/steady-profiles", "steady: where -steady-pprof's profiles go")
	applyScale := scaleFlags(&ec.scale, &ec.tenants)
	quick := flag.Bool("quick", false, "small sizes for the extra workloads (a look, not the figures): fanout 1,000 watchers and 500 puts, bigdelete 20,000 keys, idle 30s (with -idle-apiserver: 30s settling, 1m measured), startup 100,000 keys, pgnet 300 and 2,000 creates, mixed 5s, watchers 5s, catchup 500 revisions, steady 3s of warm-up and 10s measured, scale 5,000 objects and 1m of updates, tenants 200 objects each and 30s of updates")
	ec.idleKeys, ec.idleWatches = 1000, 10
	return func() {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if ec.idleAPIServer != "" && !set["idle-time"] {
			// The idle target is 10 minutes with kube-apiserver.
			ec.idleTime = 10 * time.Minute
		}
		applyScale(set, *quick)
		if !*quick {
			return
		}
		small := map[string]func(){
			"fanout-watchers": func() { ec.fanWatchers = 1000 },
			"fanout-puts":     func() { ec.fanPuts = 500 },
			"fanout-wait":     func() { ec.fanWait = time.Minute },
			"bigdelete-keys":  func() { ec.delKeys = 20_000 },
			"idle-time": func() {
				ec.idleTime = 30 * time.Second
				if ec.idleAPIServer != "" {
					ec.idleTime = time.Minute
				}
			},
			"idle-settle":       func() { ec.idleSettle = 30 * time.Second },
			"startup-keys":      func() { ec.startKeys = 100_000 },
			"pgnet-single":      func() { ec.netSingle = 300 },
			"pgnet-keys":        func() { ec.netKeys = 2000 },
			"mixed-time":        func() { ec.mixedTime = 5 * time.Second },
			"watchers-time":     func() { ec.watchersTime = 5 * time.Second },
			"catchup-revisions": func() { ec.catchupRevisions = 500 },
			"steady-warmup":     func() { ec.steady.warmup = 3 * time.Second },
			"steady-time":       func() { ec.steady.window = 10 * time.Second },
		}
		for name, f := range small {
			if !set[name] {
				f()
			}
		}
	}
}

func (ec *extraConfig) check() error {
	rates, err := parseInts(ec.steadyRates)
	if err != nil {
		return fmt.Errorf("-steady-rates: %w", err)
	}
	ec.steady.rates = rates
	if err := ec.scale.check(); err != nil {
		return err
	}
	if err := ec.tenants.check(); err != nil {
		return err
	}
	switch {
	case ec.steady.keys < 1 || ec.steady.valueSize < 1 || ec.steady.warmup < 0 || ec.steady.window < time.Second:
		return fmt.Errorf("steady: want keys and a value size >= 1, a warm-up >= 0 and a window >= 1s")
	case ec.fanWatchers < 1 || ec.fanConns < 1 || ec.fanConns > ec.fanWatchers || ec.fanPuts < 1:
		return fmt.Errorf("fanout: want watchers >= conns >= 1 and puts >= 1")
	case ec.delKeys < 1 || ec.delClients < 1:
		return fmt.Errorf("bigdelete: want keys and clients >= 1")
	case ec.idleTime <= 0 || ec.idleSettle < 0:
		return fmt.Errorf("idle: want -idle-time > 0 and -idle-settle >= 0")
	case ec.startKeys < 1 || ec.startVersions < 1 || ec.startValue < 0:
		return fmt.Errorf("startup: want keys and versions >= 1")
	case ec.netLatency <= 0 || ec.netSingle < 1 || ec.netClients < 1 || ec.netKeys < 1 || ec.netTime <= 0:
		return fmt.Errorf("pgnet: want a latency and phase time > 0, and creates and clients >= 1")
	case ec.mixedClients < 1 || ec.mixedKeys < 1 || ec.mixedTime <= 0 || ec.mixedGetRate < 0:
		return fmt.Errorf("mixed: want clients and keys >= 1, a time > 0 and a get rate >= 0")
	case ec.watchersStreams < watchersPrefixes || ec.watchersClients < 1 || ec.watchersKeys < watchersPrefixes || ec.watchersTime <= 0 || ec.watchersWait <= 0:
		return fmt.Errorf("watchers: want streams and keys >= %d, clients >= 1, and times > 0", watchersPrefixes)
	case ec.catchupRevisions < catchupKeys || ec.catchupValueSize < 1 || ec.catchupValueSize > 1<<20 || ec.catchupWait <= 0:
		return fmt.Errorf("catchup: want revisions >= %d, a value size of 1 byte to 1 MiB (etcd takes requests up to 1.5 MiB) and a wait > 0", catchupKeys)
	case ec.watchersKeys%watchersStride == 0:
		return fmt.Errorf("watchers: -watchers-keys %d is a multiple of %d, which would put every update on one key", ec.watchersKeys, watchersStride)
	}
	if ec.idleAPIServer != "" {
		if st, err := os.Stat(ec.idleAPIServer); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("idle: -idle-apiserver %s is not an executable (scripts/kubernetes.sh builds kube-apiserver)", ec.idleAPIServer)
		}
	}
	return nil
}

// extraWorkloads are the workloads beside the table, in the order they run.
var extraWorkloads = []string{"fanout", "bigdelete", "idle", "startup", "pgnet", "mixed", "watchers", "catchup", "steady"}

// onDemandWorkloads run only when named: each takes most of an hour at its
// full size, which `all` (make bench's default) should not grow by.
var onDemandWorkloads = []string{"scale", "tenants"}

// parseWorkloads reads -workloads: "table", the extra names, or "all".
func parseWorkloads(s string) (table bool, extras []string, err error) {
	for _, w := range strings.Split(s, ",") {
		switch w = strings.TrimSpace(w); w {
		case "table":
			table = true
		case "all":
			table, extras = true, extraWorkloads
		case "fanout", "bigdelete", "idle", "startup", "pgnet", "mixed", "watchers", "catchup", "steady", "scale", "tenants":
			extras = append(extras, w)
		default:
			return false, nil, fmt.Errorf("-workloads: unknown workload %q (want table, %s, %s, or all, which leaves out %s)", w,
				strings.Join(extraWorkloads, ", "), strings.Join(onDemandWorkloads, ", "), strings.Join(onDemandWorkloads, " and "))
		}
	}
	return table, dedupe(extras), nil
}

// fresh is an empty data directory (and, for a Postgres or MySQL target,
// a new database) for one round of one workload.
type fresh struct {
	dir, db string
	cleanup func()
}

func prepare(ctx context.Context, t target, workDir string, pg *pgCluster, label string, round int) (*fresh, error) {
	safe := strings.NewReplacer("/", "-", " ", "", "(", "", ")", "").Replace(t.name)
	dir := filepath.Join(workDir, fmt.Sprintf("%s%s-r%d", safe, label, round))
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f := &fresh{dir: dir, cleanup: func() { os.RemoveAll(dir) }}
	if t.engine == "postgres" || t.engine == "mysql" {
		// A name MySQL takes unquoted: quantykube@base is quantykube_base.
		ident := strings.NewReplacer("-", "_", "@", "_")
		f.db = fmt.Sprintf("bench_%s%s_r%d_%d", ident.Replace(strings.Split(t.name, "/")[0]), ident.Replace(label), round, time.Now().Unix())
		create := pg.createDB
		if t.engine == "mysql" {
			create = benchMySQL.createDB
		}
		if err := create(ctx, f.db); err != nil {
			f.cleanup()
			return nil, err
		}
	}
	return f, nil
}

// extraRun is one target's rounds of one workload.
type extraRun[R any] struct {
	t       target
	skipped string // why the target does not run this workload
	rounds  []R
	errs    []string
}

// eachRound runs f for every target, rounds times, each time on fresh
// data, the targets of each round in roundOrder; skip says why a target
// cannot run the workload ("" if it can).
func eachRound[R any](ctx context.Context, name string, targets []target, workDir string, pg *pgCluster, rounds int,
	skip func(target) string, f func(ctx context.Context, t target, fr *fresh) (R, error)) []*extraRun[R] {
	out := make([]*extraRun[R], len(targets))
	for i, t := range targets {
		out[i] = &extraRun[R]{t: t, skipped: skip(t)}
	}
	for r := 1; r <= rounds && ctx.Err() == nil; r++ {
		for _, i := range roundOrder(len(targets), r) {
			run, t := out[i], targets[i]
			if run.skipped != "" || ctx.Err() != nil {
				continue
			}
			logf("%s: %s, round %d of %d", t.name, name, r, rounds)
			fr, err := prepare(ctx, t, workDir, pg, "-"+name, r)
			if err == nil {
				var res R
				res, err = f(ctx, t, fr)
				fr.cleanup()
				if err == nil {
					run.rounds = append(run.rounds, res)
					// The tables give the best round; this is each one,
					// for reading an A/B round by round.
					if sum, ok := any(res).(fmt.Stringer); ok {
						logf("%s: %s, round %d: %s", t.name, name, r, sum)
					}
					continue
				}
			}
			logf("%s: %s, round %d: %v", t.name, name, r, err)
			run.errs = append(run.errs, err.Error())
		}
	}
	return out
}

// runExtras runs the named workloads and prints a table for each.
func runExtras(ctx context.Context, w io.Writer, names []string, targets []target, workDir string, pg *pgCluster, rounds int, ec extraConfig) error {
	if err := ec.check(); err != nil {
		return err
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		started := time.Now()
		load := loadAvg()
		var print func(io.Writer)
		switch name {
		case "fanout":
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, noSkip, func(ctx context.Context, t target, fr *fresh) (*fanoutResult, error) {
				return withServer(ctx, t, fr, func(srv *server) (*fanoutResult, error) { return runFanout(ctx, srv, ec) })
			})
			print = func(w io.Writer) { printFanout(w, runs, ec) }
		case "bigdelete":
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, needsMultiOpTxn, func(ctx context.Context, t target, fr *fresh) (*bigDeleteResult, error) {
				return withServer(ctx, t, fr, func(srv *server) (*bigDeleteResult, error) { return runBigDelete(ctx, srv, ec) })
			})
			print = func(w io.Writer) { printBigDelete(w, runs, ec) }
		case "idle":
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, noSkip, func(ctx context.Context, t target, fr *fresh) (*idleResult, error) {
				return withServer(ctx, t, fr, func(srv *server) (*idleResult, error) {
					if ec.idleAPIServer == "" {
						return runIdle(ctx, srv, ec, keepsLeases(t))
					}
					var tpg *pgCluster
					if t.engine == "postgres" {
						tpg = pg
					}
					return runIdleAPIServer(ctx, srv, fr, tpg, ec)
				})
			})
			print = func(w io.Writer) { printIdle(w, runs, ec) }
		case "startup":
			runs := eachRound(ctx, name, targets, workDir, pg, 1, needsMultiOpTxn, func(ctx context.Context, t target, fr *fresh) (*startupResult, error) {
				return runStartup(ctx, t, fr, ec, rounds)
			})
			print = func(w io.Writer) { printStartup(w, runs, ec, rounds) }
		case "pgnet":
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, pgnetOnly, func(ctx context.Context, t target, fr *fresh) (*pgnetResult, error) {
				return runPGNet(ctx, t, fr, pg, ec)
			})
			print = func(w io.Writer) { printPGNet(w, runs, ec) }
		case "mixed":
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, noSkip, func(ctx context.Context, t target, fr *fresh) (*mixedResult, error) {
				return withServer(ctx, t, fr, func(srv *server) (*mixedResult, error) { return runMixed(ctx, srv, dbPID(t, pg), ec) })
			})
			print = func(w io.Writer) { printMixed(w, runs, ec) }
		case "watchers":
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, needsMultiOpTxn, func(ctx context.Context, t target, fr *fresh) (*watchersResult, error) {
				return withServer(ctx, t, fr, func(srv *server) (*watchersResult, error) { return runWatchers(ctx, srv, ec) })
			})
			print = func(w io.Writer) { printWatchers(w, runs, ec) }
		case "catchup":
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, noSkip, func(ctx context.Context, t target, fr *fresh) (*catchupResult, error) {
				return withServer(ctx, t, fr, func(srv *server) (*catchupResult, error) { return runCatchup(ctx, srv, dbPID(t, pg), ec) })
			})
			print = func(w io.Writer) { printCatchup(w, runs, ec) }
		case "steady":
			if ec.steady.pprof != "" {
				if err := os.MkdirAll(ec.steady.pprofDir, 0o755); err != nil {
					return err
				}
			}
			round := map[string]int{}
			runs := eachRound(ctx, name, targets, workDir, pg, rounds, steadySkip, func(ctx context.Context, t target, fr *fresh) (*steadyResult, error) {
				round[t.name]++
				return withServer(ctx, t, fr, func(srv *server) (*steadyResult, error) {
					return runSteady(ctx, t, srv, fr, round[t.name], ec.steady, ec.reqTimeout)
				})
			})
			print = func(w io.Writer) { printSteady(w, runs, ec.steady) }
		case "scale":
			if ec.idleAPIServer == "" {
				return fmt.Errorf("scale: no kube-apiserver: pass -idle-apiserver PATH (scripts/bench.sh passes the one scripts/kubernetes.sh built)")
			}
			runs := eachRound(ctx, name, targets, workDir, pg, ec.scale.rounds, scaleSkip, func(ctx context.Context, t target, fr *fresh) (*scaleResult, error) {
				return withServer(ctx, t, fr, func(srv *server) (*scaleResult, error) {
					size := func() int64 { return dirSize(fr.dir) }
					if t.engine == "postgres" {
						size = func() int64 { return pg.dbSize(ctx, fr.db) }
					}
					return runScale(ctx, srv, fr, ec.idleAPIServer, ec.scale, ec.reqTimeout, size)
				})
			})
			print = func(w io.Writer) { printScale(w, runs, ec.scale, ec.idleAPIServer) }
		case "tenants":
			if pg == nil {
				return fmt.Errorf("tenants: no PostgreSQL cluster (see -pg-bin, and -targets with a postgres target)")
			}
			runs := eachTarget(ctx, name, targets, tenantsSkip, func(ctx context.Context, t target) (*tenantsResult, error) {
				return runTenants(ctx, t, workDir, pg, ec.tenants, ec.reqTimeout)
			})
			print = func(w io.Writer) { printTenants(w, runs, ec.tenants) }
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(w, "\n### %s: run %s, %v; load average %s at the start, %s at the end\n\n", name, time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(started).Round(time.Second), load, loadAvg())
		print(w)
	}
	return nil
}

// withServer starts t on fr, runs f against it, and stops it.
func withServer[R any](ctx context.Context, t target, fr *fresh, f func(*server) (R, error)) (R, error) {
	srv, err := launch(ctx, t, fr.dir, fr.db)
	if err != nil {
		var zero R
		return zero, err
	}
	defer srv.stop()
	return f(srv)
}

func noSkip(target) string { return "" }

// steadySkip keeps issue 40's comparison: etcd and the SQLite targets.
func steadySkip(t target) string {
	if t.engine != "sqlite" && t.engine != "bbolt" {
		return "the steady comparison is etcd's and SQLite's"
	}
	return needsMultiOpTxn(t)
}

// needsMultiOpTxn skips kine: these workloads load their data in
// transactions of many puts, which kine does not accept.
func needsMultiOpTxn(t target) string {
	if strings.HasPrefix(t.name, "kine") {
		return "kine accepts no multi-put transaction, which loads this workload's data"
	}
	return ""
}

// loadAvg is the machine's 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// putChunk is how many puts one loading transaction carries: under etcd's
// default --max-txn-ops (128).
const putChunk = 100

// loadKeys puts key(0) .. key(n-1) with val in transactions of putChunk
// puts on 16 clients, untimed.
func loadKeys(ctx context.Context, conns []*clientv3.Client, n int, key func(int) string, val string, reqTimeout time.Duration) error {
	chunks := (n + putChunk - 1) / putChunk
	st := drive(ctx, conns, 16, chunks, time.Hour, reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
		ops := make([]clientv3.Op, 0, putChunk)
		for i := j * putChunk; i < min((j+1)*putChunk, n); i++ {
			ops = append(ops, clientv3.OpPut(key(i), val))
		}
		_, err := c.Txn(ctx).Then(ops...).Commit()
		return err
	})
	if st.ops != chunks {
		return fmt.Errorf("load %d keys: %d of %d transactions succeeded (%d errors, first: %s)", n, st.ops, chunks, st.errs, st.firstErr)
	}
	return nil
}

// isQuantyKube tells the build under test from its peers (an older build,
// quantykube@base, is a peer).
func isQuantyKube(t target) bool {
	return strings.HasPrefix(t.name, "quantykube") && !strings.HasPrefix(t.name, "quantykube@base")
}

// notes prints why targets were skipped or failed.
func printNotes[R any](w io.Writer, runs []*extraRun[R]) {
	var lines []string
	for _, r := range runs {
		if r.skipped != "" {
			lines = append(lines, fmt.Sprintf("%s: not run (%s)", r.t.name, r.skipped))
		}
		for _, e := range dedupe(r.errs) {
			if i := strings.IndexByte(e, '\n'); i >= 0 {
				e = e[:i]
			}
			lines = append(lines, fmt.Sprintf("%s: a round failed: %s", r.t.name, e))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
		for _, l := range lines {
			fmt.Fprintln(w, "- "+l)
		}
	}
}

// bestOf is the better of the rounds' values of one figure (0s ignored).
func bestOf[R any](rounds []R, f func(R) float64, higher bool) float64 {
	var b float64
	for _, r := range rounds {
		b = better(b, f(r), higher)
	}
	return b
}

// worstOf is the worst of the rounds' values of a count of anomalies.
func worstOf[R any](rounds []R, f func(R) int64) int64 {
	var b int64
	for _, r := range rounds {
		b = max(b, f(r))
	}
	return b
}

// fewestOf is the worst of the rounds' values of a count of things done.
func fewestOf[R any](rounds []R, f func(R) int64) int64 {
	var b int64
	for i, r := range rounds {
		if i == 0 || f(r) < b {
			b = f(r)
		}
	}
	return b
}

// ratioCol is one figure of a workload's ratio table.
type ratioCol[R any] struct {
	name   string
	f      func(R) float64
	higher bool // a higher value is better
}

// printRatios prints how many times better each QuantyKube target is than
// etcd and than kine on the same engine, figure by figure (best rounds).
func printRatios[R any](w io.Writer, runs []*extraRun[R], cols []ratioCol[R]) {
	var rows []string
	for _, q := range runs {
		if !isQuantyKube(q.t) || len(q.rounds) == 0 {
			continue
		}
		for _, p := range runs {
			// Same engine, and etcd for everyone; an older build is a peer.
			if isQuantyKube(p.t) || len(p.rounds) == 0 || (p.t.name != "etcd" && p.t.engine != q.t.engine) {
				continue
			}
			row := fmt.Sprintf("| %s vs %s |", q.t.name, p.t.name)
			for _, c := range cols {
				row += " " + ratio(bestOf(q.rounds, c.f, c.higher), bestOf(p.rounds, c.f, c.higher), c.higher) + " |"
			}
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	hdr, sep := "| QuantyKube vs peer |", "|---|"
	for _, c := range cols {
		hdr += " " + c.name + " |"
		sep += "---:|"
	}
	fmt.Fprintln(w, hdr)
	fmt.Fprintln(w, sep)
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	fmt.Fprintln(w, "\nAbove 1x QuantyKube is ahead (rates: QuantyKube ÷ peer; times, CPU and memory: peer ÷ QuantyKube).")
}
