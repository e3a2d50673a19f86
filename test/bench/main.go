// Command bench measures QuantyKube against its peers (kine, etcd) with
// kube-apiserver's request shapes through go.etcd.io/etcd/client/v3.
//
// Each server runs as its own process on a free loopback port with a fresh
// data directory (or a fresh Postgres database), one after another in the
// same run; each figure is the better of -rounds rounds (correctness counts
// are the worse). Each round runs every target once, in the order given in
// odd rounds and reversed in even ones (roundOrder). `make bench` (scripts/bench.sh) builds the peers and runs
// this; docs/BENCHMARKS.md explains the table, docs/benchmarks/harness.md
// every workload in full.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/mytest"
	"github.com/quantyroot/quantykube/test/pgtest"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve-profiled" {
		if err := serveProfiled(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "serve-profiled:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run() error {
	qkBin := flag.String("quantykube", "", "quantykube binary (empty: skip QuantyKube)")
	qkFlags := flag.String("quantykube-flags", "", "more `quantykube serve` flags for the QuantyKube targets, space-separated (e.g. \"--pprof-address 127.0.0.1:6060\" to profile a workload from outside)")
	qkBase := flag.String("quantykube-base", "", "a second quantykube binary, measured in the same run as \"quantykube@base\" (an older commit, to compare before and after)")
	kineBin := flag.String("kine", "", "kine binary (empty: skip kine)")
	etcdBin := flag.String("etcd", "", "etcd binary (empty: skip etcd)")
	only := flag.String("targets", "", "comma-separated target names to run (default: all available)")
	pgBin := flag.String("pg-bin", "/usr/lib/postgresql/15/bin", "PostgreSQL server binaries; empty: no Postgres targets")
	mysqlFlag := flag.Bool("mysql", true, "also run quantykube/mysql, kine/mysql and (with -quantykube-base) quantykube@base/mysql on one throwaway MariaDB ("+mytest.DefaultServer+"), in the table only")
	pgbouncer := flag.Bool("pgbouncer", true, "also run quantykube/pgbouncer: QuantyKube through PgBouncer in transaction mode ("+pgtest.DefaultPgBouncer+" or $"+pgtest.EnvPgBouncer+")")
	clientsFlag := flag.String("clients", "1,16,64", "client counts")
	keys := flag.Int("keys", 5000, "keys per write phase")
	valueSize := flag.Int("value-size", 1024, "value bytes")
	phaseTime := flag.Duration("phase-time", 15*time.Second, "upper bound on each timed phase")
	listOps := flag.Int("list-ops", 200, "list requests per list phase (at most)")
	list100k := flag.Bool("list100k", false, "also list 10,000 of 100,000 keys (fills 100,000 keys per round: minutes on kine)")
	rounds := flag.Int("rounds", 2, "rounds per target; each figure is the best; even rounds run the targets in reverse order")
	bigRounds := flag.Int("list100k-rounds", 1, "rounds (from the first) that fill and list the 100,000 keys")
	profileDir := flag.String("profile", "", "after the table, run the workload once more against QuantyKube served by this binary and write a CPU profile per phase into this directory")
	profileTrace := flag.Bool("profile-trace", false, "with -profile: also write an execution trace per phase")
	profileEngine := flag.String("profile-engine", "sqlite", "the profiled run's database: sqlite or postgres (a fresh database in the throwaway cluster)")
	work := flag.String("work", ".cache/bench/run", "where the servers' data directories go")
	growth := flag.Bool("growth", false, "instead of the table: QuantyKube's write and read latency at 10^4 and 10^6 retained revisions")
	growthRevs := flag.String("growth-revisions", "10000,1000000", "retained-revision checkpoints for -growth")
	growthBudget := flag.String("growth-budget", "", "with -growth: instead, the growth run through retention: the server keeps at most this much history (--retain-bytes, e.g. 256Mi) for at most -growth-retain; the report checks the file against the budget plus the live state plus 20% and RSS for flatness")
	growthRate := flag.Float64("growth-rate", 2000, "with -growth-budget: fill at most this many Puts per second (0: flat out, faster than pruning keeps up on a small machine)")
	growthRetain := flag.String("growth-retain", "2m", "with -growth-budget: the server's --retain")
	growthPaired := flag.Int("growth-paired-rounds", 8, "with -growth: rounds that time updates in turn on the first checkpoint's data and the last's (0: none)")
	history := flag.Bool("history", false, "instead of the table: only quantykube.History (Get at a time, Log of a busy key) at 1 and 16 clients, on growth data filled once and kept under -history-cache (with -quantykube-base: that binary too, same data)")
	historyRevs := flag.Int("history-revisions", 1_000_000, "retained revisions of -history's data")
	historyCache := flag.String("history-cache", ".cache/bench/history", "where -history keeps its filled data directories")
	changes := flag.Bool("changes", false, "instead of the table: the first page (500, newest first) of the last hour's changes over -history-revisions on -history's cached data, read every -changes-read-interval while -changes-rate updates/s run, against the updates alone (and etcd's, with -etcd)")
	changesRate := flag.Int("changes-rate", 1000, "with -changes: updates per second")
	changesTime := flag.Duration("changes-time", time.Minute, "with -changes: each phase's length")
	changesEvery := flag.Duration("changes-read-interval", 100*time.Millisecond, "with -changes: how often the reader asks for the page (0: back to back)")
	replCost := flag.Bool("replicate", false, "instead of the table: issue 54's cost of serve --replicate: the steady workload's updates (-steady-keys, -steady-value-size, -steady-warmup; -steady-pprof profiles each window) at -replicate-rate for -replicate-time on QuantyKube/SQLite without replication, with file:// and (with -replicate-weed) s3:// to SeaweedFS, -rounds rounds")
	replRate := flag.Int("replicate-rate", 500, "with -replicate: updates per second")
	replTime := flag.Duration("replicate-time", time.Minute, "with -replicate: each variant's measured window")
	replWeed := flag.String("replicate-weed", os.Getenv("QUANTY_WEED"), "with -replicate: SeaweedFS's weed binary (scripts/seaweedfs.sh), for the s3:// variant against a local `weed server -s3`; empty: no s3:// variant")
	replRestore := flag.Bool("replicate-restore", false, "instead of the table: issue 54's restore figure: restore --from a file:// bucket (the latest, and --revision at the middle) beside a local restore FILE, on a store of -replicate-restore-revisions filled and replicated once into -replicate-cache")
	replRestoreRevs := flag.Int("replicate-restore-revisions", 1_000_000, "with -replicate-restore: the store's revisions (of -value-size random bytes: 10^6 make about 1 GB)")
	replCache := flag.String("replicate-cache", ".cache/bench/replicate", "where -replicate-restore keeps its filled store, bucket and backup")
	workloads := flag.String("workloads", "table", "what to run, comma-separated: table (the request shapes above), fanout, bigdelete, idle, startup, pgnet, mixed, watchers, catchup, steady, or all; scale and tenants (issue 58's memory at 50,000 objects and with 30 tenants) only when named")
	var ec extraConfig
	applyQuick := extraFlags(&ec)
	flag.Parse()
	applyQuick()
	table, extras, err := parseWorkloads(*workloads)
	if err != nil {
		return err
	}

	// The servers run in their data directories: make the paths absolute.
	for _, b := range []*string{qkBin, qkBase, kineBin, etcdBin, &ec.idleAPIServer} {
		if *b != "" {
			abs, err := filepath.Abs(*b)
			if err != nil {
				return err
			}
			*b = abs
		}
	}
	clients, err := parseInts(*clientsFlag)
	if err != nil {
		return err
	}
	cfg := config{clients: clients, keys: *keys, valueSize: *valueSize, phaseTime: *phaseTime, listOps: *listOps,
		list100k: *list100k, bigKeys: 100_000, bigLimit: 10_000, reqTimeout: 30 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return err
	}
	workDir, err := filepath.Abs(*work)
	if err != nil {
		return err
	}

	if *growth {
		if *qkBin == "" {
			return fmt.Errorf("-growth needs -quantykube")
		}
		checkpoints, err := parseInts(*growthRevs)
		if err != nil {
			return err
		}
		if *growthBudget != "" {
			return runGrowthBudget(ctx, *qkBin, workDir, cfg, checkpoints, *growthBudget, *growthRetain, *growthRate, strings.Fields(*qkFlags))
		}
		return runGrowth(ctx, *qkBin, workDir, cfg, checkpoints, *growthPaired)
	}

	if *changes {
		if *qkBin == "" {
			return fmt.Errorf("-changes needs -quantykube")
		}
		cache, err := filepath.Abs(*historyCache)
		if err != nil {
			return err
		}
		return runChanges(ctx, *qkBin, *etcdBin, cache, workDir, cfg, *historyRevs, *changesRate, *rounds, *changesTime, *changesEvery)
	}

	if *replCost {
		if *qkBin == "" {
			return fmt.Errorf("-replicate needs -quantykube")
		}
		if *replRate < 1 || *replTime < time.Second {
			return fmt.Errorf("-replicate-rate %d, -replicate-time %v: want at least 1 and 1s", *replRate, *replTime)
		}
		sc := ec.steady
		sc.window, sc.extra = *replTime, strings.Fields(*qkFlags)
		if sc.pprof != "" {
			if err := os.MkdirAll(sc.pprofDir, 0o755); err != nil {
				return err
			}
		}
		var weedURL func(string) string
		if *replWeed != "" {
			url, stop, err := startWeed(*replWeed, filepath.Join(workDir, "seaweedfs"))
			if err != nil {
				return fmt.Errorf("-replicate-weed %s: %w", *replWeed, err)
			}
			defer stop()
			weedURL = url
		} else {
			logf("replicate: no -replicate-weed: no s3:// variant")
		}
		if err := runReplicateCost(ctx, *qkBin, workDir, replVariants(weedURL), sc, *replRate, *rounds, cfg.reqTimeout); err != nil {
			return err
		}
	}
	if *replRestore {
		if *qkBin == "" {
			return fmt.Errorf("-replicate-restore needs -quantykube")
		}
		cache, err := filepath.Abs(*replCache)
		if err != nil {
			return err
		}
		if *replRestoreRevs < 1000 {
			return fmt.Errorf("-replicate-restore-revisions %d: want at least 1000", *replRestoreRevs)
		}
		return runReplicateRestore(ctx, *qkBin, cache, workDir, cfg, *replRestoreRevs, *rounds)
	}
	if *replCost {
		return nil
	}

	if *history {
		if *qkBin == "" {
			return fmt.Errorf("-history needs -quantykube")
		}
		cache, err := filepath.Abs(*historyCache)
		if err != nil {
			return err
		}
		bins, names := map[string]string{"quantykube": *qkBin}, []string{"quantykube"}
		if *qkBase != "" {
			bins["quantykube@base"] = *qkBase
			names = append(names, "quantykube@base")
		}
		return runHistory(ctx, bins, names, strings.Fields(*qkFlags), cache, cfg, *historyRevs, *rounds)
	}

	var pg *pgCluster
	wantPG := *pgBin != "" && (*qkBin != "" || *qkBase != "" || *kineBin != "")
	if wantPG {
		if _, err := os.Stat(filepath.Join(*pgBin, "initdb")); err != nil {
			logf("no Postgres at %s: Postgres targets skipped", *pgBin)
			wantPG = false
		}
	}
	profilePG := *profileDir != "" && *profileEngine == "postgres"
	if *profileEngine != "sqlite" && *profileEngine != "postgres" {
		return fmt.Errorf("-profile-engine %q: want sqlite or postgres", *profileEngine)
	}
	if wantPG && *only != "" && !strings.Contains(*only, "postgres") && !strings.Contains(*only, "pgbouncer") && !profilePG {
		wantPG = false
	}
	if wantPG {
		logf("starting a throwaway PostgreSQL cluster")
		pg, err = startPostgres(ctx, *pgBin, pgMaxConns(extras, ec.tenants))
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		defer pg.stop()
	}

	var targets []target
	if *qkBin != "" {
		targets = append(targets, quantykubeTarget("quantykube", *qkBin, nil, strings.Fields(*qkFlags)))
	}
	if *qkBase != "" {
		targets = append(targets, quantykubeTarget("quantykube@base", *qkBase, nil, strings.Fields(*qkFlags)))
	}
	if *kineBin != "" {
		targets = append(targets, kineTarget(*kineBin, nil))
	}
	if *etcdBin != "" {
		targets = append(targets, etcdTarget(*etcdBin))
	}
	if pg != nil {
		if *qkBin != "" {
			targets = append(targets, quantykubeTarget("quantykube", *qkBin, pg, strings.Fields(*qkFlags)))
		}
		if *qkBase != "" {
			targets = append(targets, quantykubeTarget("quantykube@base", *qkBase, pg, strings.Fields(*qkFlags)))
		}
		if *kineBin != "" {
			targets = append(targets, kineTarget(*kineBin, pg))
		}
		if *qkBin != "" && *pgbouncer {
			pool, err := pgtest.StartPgBouncer(ctx, "127.0.0.1", pg.port, "transaction")
			if err != nil {
				return fmt.Errorf("pgbouncer (-pgbouncer=false leaves it out): %w", err)
			}
			defer pool.Destroy()
			targets = append(targets, pooledTarget(*qkBin, pg, pool, strings.Fields(*qkFlags)))
		}
	}
	// The MySQL targets run the table's workload; the other workloads know
	// only SQLite and PostgreSQL.
	extraTargets := targets
	wantMySQL := *mysqlFlag && table && (*qkBin != "" || *qkBase != "" || *kineBin != "") && (*only == "" || strings.Contains(*only, "mysql"))
	if wantMySQL {
		if _, err := os.Stat(mytest.DefaultServer); err != nil {
			logf("no MariaDB at %s: MySQL targets skipped", mytest.DefaultServer)
			wantMySQL = false
		}
	}
	if wantMySQL {
		logf("starting a throwaway MariaDB")
		my, err := startMySQL(ctx)
		if err != nil {
			return fmt.Errorf("mariadb (-mysql=false leaves it out): %w", err)
		}
		defer my.stop()
		benchMySQL = my
		if *qkBin != "" {
			targets = append(targets, mysqlTarget("quantykube", *qkBin, false, strings.Fields(*qkFlags)))
		}
		if *qkBase != "" {
			targets = append(targets, mysqlTarget("quantykube@base", *qkBase, false, strings.Fields(*qkFlags)))
		}
		if *kineBin != "" {
			targets = append(targets, mysqlTarget("kine", *kineBin, true, nil))
		}
	}
	if *only != "" {
		want := map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			want[strings.TrimSpace(n)] = true
		}
		var keep []target
		for _, t := range targets {
			if want[t.name] {
				keep = append(keep, t)
			}
		}
		targets = keep
		keep = nil
		for _, t := range extraTargets {
			if want[t.name] {
				keep = append(keep, t)
			}
		}
		extraTargets = keep
	}
	if len(targets) == 0 {
		return fmt.Errorf("no targets: pass -quantykube, -kine and/or -etcd")
	}

	if table {
		started := time.Now()
		results := make([]*targetResult, len(targets))
		for i, t := range targets {
			results[i] = &targetResult{t: t}
		}
		for r := 1; r <= *rounds && ctx.Err() == nil; r++ {
			for _, i := range roundOrder(len(targets), r) {
				if ctx.Err() != nil {
					break
				}
				tr := results[i]
				logf("%s: round %d of %d", tr.t.name, r, *rounds)
				rcfg := cfg
				rcfg.list100k = cfg.list100k && r <= *bigRounds
				rr := runRound(ctx, tr.t, workDir, pg, r, rcfg)
				if rr.err != nil {
					logf("%s: round %d: %v", tr.t.name, r, rr.err)
				}
				tr.rounds = append(tr.rounds, rr)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		printReport(os.Stdout, results, cfg, time.Since(started))
	}
	if len(extras) > 0 {
		ec.valueSize, ec.reqTimeout = cfg.valueSize, cfg.reqTimeout
		if err := runExtras(ctx, os.Stdout, extras, extraTargets, workDir, pg, *rounds, ec); err != nil {
			return err
		}
	}

	if *profileDir != "" && *qkBin != "" && table {
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			return err
		}
		dir, _ := filepath.Abs(*profileDir)
		self, err := os.Executable()
		if err != nil {
			return err
		}
		port, err := freePort()
		if err != nil {
			return err
		}
		var ppg *pgCluster
		if profilePG {
			if pg == nil {
				return fmt.Errorf("-profile-engine postgres: no PostgreSQL cluster (see -pg-bin)")
			}
			ppg = pg
		}
		t := profiledTarget(self, port, dir, ppg, *profileTrace)
		logf("%s: one round, CPU profile per phase into %s", t.name, dir)
		rr := runRound(ctx, t, workDir, ppg, 1, cfg)
		if rr.err != nil {
			return rr.err
		}
		tr := &targetResult{t: t, rounds: []*roundResult{rr}}
		fmt.Println()
		fmt.Println("Profiled run (same pkg/endpoint code in the harness binary; not part of the comparison):")
		printReport(os.Stdout, []*targetResult{tr}, cfg, 0)
	}
	return nil
}

// runRound starts the target on fresh data, runs the workload, records the
// server's memory, and stops it.
func runRound(ctx context.Context, t target, workDir string, pg *pgCluster, round int, cfg config) *roundResult {
	fr, err := prepare(ctx, t, workDir, pg, "", round)
	if err != nil {
		return &roundResult{err: err}
	}
	defer fr.cleanup()
	srv, err := launch(ctx, t, fr.dir, fr.db)
	if err != nil {
		return &roundResult{err: err}
	}
	hooks := phaseHooks{serverPID: srv.pid, dbPID: dbPID(t, pg)}
	if t.profiled {
		hooks.start = func(name string) {
			if err := profileControl(t.control, "/start?name="+name); err != nil {
				logf("profile start %s: %v", name, err)
			}
		}
		hooks.stop = func(string) {
			if err := profileControl(t.control, "/stop"); err != nil {
				logf("profile stop: %v", err)
			}
		}
	}
	rr, err := runWorkload(ctx, srv.endpoint, cfg, hooks)
	if rr == nil {
		rr = &roundResult{}
	}
	rr.err = err
	if m, err := readMemory(srv.pid); err == nil {
		rr.mem = m
	}
	if t.engine == "postgres" {
		rr.dbBytes = pg.dbSize(ctx, fr.db)
	} else if t.engine == "mysql" {
		rr.dbBytes = benchMySQL.dbSize(ctx, fr.db)
	} else if n := dirSize(fr.dir); n > 0 {
		rr.dbBytes = n
	}
	srv.stop()
	return rr
}

// server is one running target.
type server struct {
	endpoint string
	pid      int
	// took is from the process's start to its first answer.
	took time.Duration
	stop func()
}

// launchDialled is launch with 16 clients of the server; its stop closes
// them first.
func launchDialled(ctx context.Context, t target, dir, db string) (*server, []*clientv3.Client, error) {
	srv, err := launch(ctx, t, dir, db)
	if err != nil {
		return nil, nil, err
	}
	conns, err := dialConns(srv.endpoint, 16)
	if err != nil {
		srv.stop()
		return nil, nil, err
	}
	stop := srv.stop
	srv.stop = func() { closeAll(conns); stop() }
	return srv, conns, nil
}

// launch starts t on dir (and database db) on a free port and waits until
// it answers; stop ends it.
func launch(ctx context.Context, t target, dir, db string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	t0 := time.Now()
	cmd, err := t.start(sctx, dir, db, port)
	if err != nil {
		cancel()
		return nil, err
	}
	endpoint, stop, err := supervise(ctx, cmd, port, dir)
	if err != nil {
		cancel()
		return nil, err
	}
	return &server{endpoint: endpoint, pid: cmd.Process.Pid, took: time.Since(t0), stop: func() { stop(); cancel() }}, nil
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// supervise waits until the server started as cmd (its log in
// dir/server.log) answers on port, and returns its endpoint and a stop that
// asks it to exit (SIGTERM) and kills its process group after 20 s.
func supervise(ctx context.Context, cmd *exec.Cmd, port int, dir string) (endpoint string, stop func(), err error) {
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	endpoint = fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitReady(ctx, endpoint, cmd, exited); err != nil {
		stop()
		return "", nil, fmt.Errorf("%w; log: %s", err, tail(filepath.Join(dir, "server.log")))
	}
	return endpoint, stop, nil
}
