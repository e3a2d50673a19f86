// Package pgtest gives tests a PostgreSQL to run QuantyKube on:
// QUANTY_TEST_POSTGRES_DSN when set (a URL whose user may CREATE DATABASE),
// otherwise a throwaway cluster (initdb + pg_ctl in a temporary directory,
// run as the postgres user when the test runs as root, listening on
// 127.0.0.1 only) when the server binaries exist. Each test gets a fresh
// database of its own.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quantyroot/quantykube/test/reaper"
)

// EnvDSN names an existing server to test against.
const EnvDSN = "QUANTY_TEST_POSTGRES_DSN"

// EnvBin overrides where the server binaries are looked for.
const EnvBin = "QUANTY_TEST_POSTGRES_BIN"

// DefaultBin is where Debian puts PostgreSQL 15's server binaries.
const DefaultBin = "/usr/lib/postgresql/15/bin"

// Server is a PostgreSQL to create test databases on.
type Server struct {
	// AdminDSN connects to a database of the server with a user that may
	// create databases.
	AdminDSN string
	// Cluster is set when this process started the server (and may stop
	// and start it).
	Cluster *Cluster
}

// Cluster is a throwaway PostgreSQL cluster.
type Cluster struct {
	Dir  string
	Port int
	bin  string
	uid  int // run as this user (-1: as ourselves)
	gid  int
	// reaper removes the cluster if this process ends without Destroy.
	reaper *reaper.Reaper
}

// ErrUnavailable means there is no DSN and no server binaries.
var ErrUnavailable = errors.New("no PostgreSQL: " + EnvDSN + " is unset and no server binaries at " + DefaultBin)

// Open returns the server to test on: the DSN from the environment, or a
// new throwaway cluster (the caller must Stop it).
func Open(ctx context.Context) (*Server, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return &Server{AdminDSN: dsn}, nil
	}
	bin := os.Getenv(EnvBin)
	if bin == "" {
		bin = DefaultBin
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return nil, ErrUnavailable
	}
	c, err := StartCluster(ctx, bin)
	if err != nil {
		return nil, err
	}
	if err := c.reapOnExit(); err != nil {
		c.Destroy()
		return nil, err
	}
	return &Server{AdminDSN: c.DSN("postgres"), Cluster: c}, nil
}

// Close stops the cluster this process started, if any, and removes it.
func (s *Server) Close() {
	if s.Cluster != nil {
		s.Cluster.Destroy()
	}
}

// StartCluster runs initdb and pg_ctl start in a new temporary directory.
func StartCluster(ctx context.Context, bin string) (*Cluster, error) {
	c := &Cluster{bin: bin, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root and there is no postgres user: %w", err)
		}
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
	}
	dir, err := os.MkdirTemp("", "quanty-pg-")
	if err != nil {
		return nil, err
	}
	c.Dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if c.uid >= 0 {
		if err := os.Chown(dir, c.uid, c.gid); err != nil {
			return nil, err
		}
	}
	if out, err := c.run(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	conf := "\nlisten_addresses = '127.0.0.1'\nmax_connections = 400\nshared_buffers = 128MB\n" +
		"unix_socket_directories = '" + dir + "'\nlogging_collector = off\n"
	f, err := os.OpenFile(filepath.Join(c.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		if c.Port, err = freePort(); err != nil {
			break
		}
		if err = c.Start(ctx); err == nil {
			return c, nil
		}
	}
	c.Destroy()
	return nil, err
}

// Attach sets up c (with Dir set) to control an existing cluster.
func (c *Cluster) Attach(bin string) {
	c.bin, c.uid, c.gid = bin, -1, -1
	if st, err := os.Stat(c.Dir); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && sys.Uid != 0 {
			c.uid, c.gid = int(sys.Uid), int(sys.Gid)
		}
	}
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

func (c *Cluster) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, tool), args...)
	cmd.Dir = c.Dir
	if c.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid)}}
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd.CombinedOutput()
}

// Start starts the server (again) and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.Dir, "server.log"), "-w", "-t", "60",
		"-o", "-p "+strconv.Itoa(c.Port), "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, tail(string(log), 2000))
	}
	return nil
}

// Stop stops the server; mode is pg_ctl's: "fast" (clean) or "immediate"
// (a crash: recovery replays the WAL at the next start).
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-m", mode, "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Destroy stops the server and removes its directory.
func (c *Cluster) Destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()
	_ = c.Stop(ctx, "immediate")
	os.RemoveAll(c.Dir)
	c.reaper.Close() // the reaper finds nothing left and ends
	c.reaper = nil
}

// reapOnExit starts the cluster's reaper (test/reaper): once this
// process has ended without Destroy, it stops the cluster (SIGQUIT:
// PostgreSQL's immediate shutdown), which pg_ctl detached, and removes
// its directory.
func (c *Cluster) reapOnExit() error {
	r, err := reaper.Start(reaper.Server{Dir: c.Dir, PIDFile: filepath.Join(c.data(), "postmaster.pid"), Name: "postgres", Signal: "QUIT"})
	if err != nil {
		return fmt.Errorf("pgtest: the cluster's %w", err)
	}
	c.reaper = r
	return nil
}

// DSN connects to database db of the cluster over 127.0.0.1.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

var dbSeq atomic.Int64

// CreateDatabase makes a new empty database and returns its DSN.
func CreateDatabase(ctx context.Context, adminDSN, prefix string) (string, error) {
	u, err := url.Parse(adminDSN)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("pgtest: %s must be a postgres:// URL", EnvDSN)
	}
	name := fmt.Sprintf("qk_%s_%d_%d_%d", sanitize(prefix), os.Getpid(), time.Now().UnixNano()%1e9, dbSeq.Add(1))
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase removes a database made by CreateDatabase (best effort).
func DropDatabase(ctx context.Context, adminDSN, dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `DROP DATABASE IF EXISTS `+strings.TrimPrefix(u.Path, "/")+` WITH (FORCE)`)
	return err
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
		if b.Len() >= 24 {
			break
		}
	}
	return b.String()
}
