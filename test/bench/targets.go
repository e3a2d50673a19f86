package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quantyroot/quantykube/test/pgtest"
)

// A target is one server under test: how to start it on a fresh data
// directory (or a fresh database) and a loopback port.
type target struct {
	name   string // e.g. "quantykube/sqlite"
	engine string // sqlite, postgres, bbolt
	// start launches the server; dir is an empty directory the target owns
	// for this round, db a fresh database name (Postgres targets only).
	start func(ctx context.Context, dir, db string, port int) (*exec.Cmd, error)
	// profiled marks the QuantyKube run whose CPU profile is captured.
	profiled bool
	// control is the profiled server's control address (profile start/stop).
	control string
	// on is the same target on another address of the cluster (pgnet's
	// proxy); nil for targets that use no PostgreSQL.
	on func(pg *pgCluster) target
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func logFile(dir string) (*os.File, error) {
	return os.Create(filepath.Join(dir, "server.log"))
}

func command(ctx context.Context, dir string, bin string, args ...string) (*exec.Cmd, error) {
	f, err := logFile(dir)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	// Its own process group, so stopping it never signals the harness.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	return cmd, nil
}

// quantykubeTarget is QuantyKube served by bin; name tells two builds apart
// in one table (QK_BASE in scripts/bench.sh); extra are more serve flags.
func quantykubeTarget(name, bin string, pg *pgCluster, extra []string) target {
	t := target{name: name + "/sqlite", engine: "sqlite"}
	if pg != nil {
		t.name, t.engine = name+"/postgres", "postgres"
	}
	t.start = func(ctx context.Context, dir, db string, port int) (*exec.Cmd, error) {
		ep := "sqlite://" + filepath.Join(dir, "state.db")
		if pg != nil {
			ep = pg.url(db)
		}
		args := append([]string{"serve", "--listen-address", fmt.Sprintf("127.0.0.1:%d", port), "--endpoint", ep}, extra...)
		return command(ctx, dir, bin, args...)
	}
	if pg != nil {
		t.on = func(pg *pgCluster) target { return quantykubeTarget(name, bin, pg, extra) }
	}
	return t
}

// pooledTarget is QuantyKube on the throwaway cluster through PgBouncer
// in transaction mode, with PgBouncer's default settings: what managed
// offerings hand out (docs/adr/026). Beside quantykube/postgres it shows
// what the pooler costs per operation; PgBouncer's own CPU is not in
// the server CPU column.
func pooledTarget(bin string, pg *pgCluster, pool *pgtest.PgBouncer, extra []string) target {
	t := target{name: "quantykube/pgbouncer", engine: "postgres"}
	t.start = func(ctx context.Context, dir, db string, port int) (*exec.Cmd, error) {
		ep, err := pool.Through(pg.url(db))
		if err != nil {
			return nil, err
		}
		args := append([]string{"serve", "--listen-address", fmt.Sprintf("127.0.0.1:%d", port), "--endpoint", ep}, extra...)
		return command(ctx, dir, bin, args...)
	}
	return t
}

// profiledTarget is QuantyKube served by this harness binary (same
// pkg/endpoint code as cmd/quantykube) so that a CPU profile can be written
// per phase; see profiled.go.
func profiledTarget(self string, control int, profileDir string, pg *pgCluster, withTrace bool) target {
	t := target{name: "quantykube/sqlite (profiled)", engine: "sqlite", profiled: true, control: fmt.Sprintf("127.0.0.1:%d", control)}
	if pg != nil {
		t.name, t.engine = "quantykube/postgres (profiled)", "postgres"
	}
	t.start = func(ctx context.Context, dir, db string, port int) (*exec.Cmd, error) {
		ep := "sqlite://" + filepath.Join(dir, "state.db")
		if pg != nil {
			ep = pg.url(db)
		}
		return command(ctx, dir, self, "serve-profiled",
			"-listen-address", fmt.Sprintf("127.0.0.1:%d", port),
			"-endpoint", ep,
			"-control-address", t.control, "-profile-dir", profileDir,
			fmt.Sprintf("-trace=%t", withTrace))
	}
	return t
}

func kineTarget(bin string, pg *pgCluster) target {
	t := target{name: "kine/sqlite", engine: "sqlite"}
	if pg != nil {
		t.name, t.engine = "kine/postgres", "postgres"
	}
	t.start = func(ctx context.Context, dir, db string, port int) (*exec.Cmd, error) {
		ep := "sqlite://" + filepath.Join(dir, "state.db")
		if pg != nil {
			ep = pg.url(db)
		}
		return command(ctx, dir, bin, "--listen-address", fmt.Sprintf("127.0.0.1:%d", port), "--endpoint", ep,
			"--metrics-bind-address", "0")
	}
	if pg != nil {
		t.on = func(pg *pgCluster) target { return kineTarget(bin, pg) }
	}
	return t
}

func etcdTarget(bin string) target {
	return target{name: "etcd", engine: "bbolt", start: func(ctx context.Context, dir, _ string, port int) (*exec.Cmd, error) {
		peer, err := freePort()
		if err != nil {
			return nil, err
		}
		c := fmt.Sprintf("http://127.0.0.1:%d", port)
		p := fmt.Sprintf("http://127.0.0.1:%d", peer)
		return command(ctx, dir, bin,
			"--name", "bench", "--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", c, "--advertise-client-urls", c,
			"--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
			"--initial-cluster", "bench="+p, "--initial-cluster-state", "new",
			"--quota-backend-bytes", strconv.Itoa(8<<30),
			"--log-level", "warn")
	}}
}

// newClient dials one endpoint with kube-apiserver-like settings.
func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:          []string{endpoint},
		DialTimeout:        10 * time.Second,
		MaxCallRecvMsgSize: 1 << 30,
		Logger:             zap.NewNop(),
	})
}

// waitReady waits until the server answers a read, or gives up. It
// returns as soon as it can: the start-up workload times it. A server that
// accepts connections before it serves (etcd and QuantyKube both listen
// before they load their data) is asked once and answers when ready.
func waitReady(ctx context.Context, endpoint string, cmd *exec.Cmd, exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	addr := strings.TrimPrefix(endpoint, "http://")
	// Connect first: a gRPC client refused once backs off for a second.
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server pid %d not listening after %v: %w", cmd.Process.Pid, startTimeout, err)
		}
		select {
		case <-exited:
			return errors.New("server exited during start")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	c, err := newClient(endpoint)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		rctx, cancel := context.WithDeadline(ctx, deadline)
		got := make(chan error, 1)
		go func() { _, err := c.Get(rctx, "/bench-ready"); got <- err }()
		select {
		case err = <-got:
		case <-exited:
			err = errors.New("server exited during start")
		}
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline), strings.Contains(err.Error(), "exited during start"):
			return fmt.Errorf("server pid %d not ready after %v: %w", cmd.Process.Pid, startTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startTimeout bounds a server's start, loading its data included.
const startTimeout = 10 * time.Minute

// memory is a process's peak and current resident set, from /proc.
type memory struct{ hwm, rss int64 } // bytes

func readMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 1 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[0], 10, 64)
		switch name {
		case "VmHWM":
			m.hwm = kb << 10
		case "VmRSS":
			m.rss = kb << 10
		}
	}
	return m, sc.Err()
}

// dirSize is the bytes of regular files under dir (the database and its
// WAL, for the file-based engines).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() != "server.log" {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// pgCluster is a throwaway PostgreSQL cluster run as the postgres user
// (initdb refuses root), listening on loopback only.
type pgCluster struct {
	bin  string
	dir  string
	port int
	cred *syscall.Credential
}

func (p *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, db)
}

func (p *pgCluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Dir = p.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startPostgres starts a throwaway cluster taking up to maxConns
// connections.
func startPostgres(ctx context.Context, bin string, maxConns int) (*pgCluster, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "quantykube-bench-pg-")
	if err != nil {
		return nil, err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &pgCluster{bin: bin, dir: dir, port: port, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	data := filepath.Join(dir, "data")
	if err := p.run(ctx, "initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"); err != nil {
		return nil, err
	}
	// Durable commits (fsync, synchronous_commit on: the defaults).
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=%d -c shared_buffers=256MB", port, dir, maxConns)
	if err := p.run(ctx, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "pg.log"), "-o", opts, "-w", "start"); err != nil {
		return nil, err
	}
	return p, nil
}

// dbPID is the postmaster of t's PostgreSQL cluster (mariadbd for a MySQL
// target), 0 for a target on SQLite (or none).
func dbPID(t target, pg *pgCluster) int {
	if t.engine == "mysql" && benchMySQL != nil {
		return benchMySQL.pid()
	}
	if t.engine != "postgres" || pg == nil {
		return 0
	}
	return pg.pid()
}

// pid is the cluster's postmaster, 0 if its pid file cannot be read.
func (p *pgCluster) pid() int {
	b, err := os.ReadFile(filepath.Join(p.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	n, _ := strconv.Atoi(strings.TrimSpace(first))
	return n
}

// connections is how many server processes serve the databases dbs.
func (p *pgCluster) connections(ctx context.Context, dbs []string) (int, error) {
	out, err := p.query(ctx, "postgres", fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE datname IN ('%s')", strings.Join(dbs, "','")))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

func (p *pgCluster) createDB(ctx context.Context, name string) error {
	return p.run(ctx, "createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "postgres", name)
}

func (p *pgCluster) dbSize(ctx context.Context, name string) int64 {
	out, err := p.query(ctx, name, "SELECT pg_database_size(current_database())")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(out, 10, 64)
	return n
}

// transactions is how many transactions database name has committed or
// rolled back so far (pg_stat_database; each statement a poller sends
// outside a transaction is one). Asked from the postgres database, so the
// question is not counted in the answer.
func (p *pgCluster) transactions(ctx context.Context, name string) (int64, error) {
	out, err := p.query(ctx, "postgres", fmt.Sprintf("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '%s'", name))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("pg_stat_database of %s: %q: %w", name, out, err)
	}
	return n, nil
}

// query runs one query in database db through psql and returns its
// unaligned answer.
func (p *pgCluster) query(ctx context.Context, db, query string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "postgres", "-d", db, "-Atc", query)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	cmd.Dir = p.dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("psql %q: %w", query, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func (p *pgCluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.run(ctx, "pg_ctl", "-D", filepath.Join(p.dir, "data"), "-m", "fast", "-w", "stop"); err != nil {
		fmt.Fprintln(os.Stderr, "bench: stopping postgres:", err)
	}
	os.RemoveAll(p.dir)
}
