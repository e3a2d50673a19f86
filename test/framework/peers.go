package framework

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/mytest"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// peer is a binary scripts/peers.sh builds, once per test binary.
type peer struct {
	name string
	once sync.Once
	path string
	err  error
}

var (
	etcdPeer    = &peer{name: "etcd"}
	etcdctlPeer = &peer{name: "etcdctl"}
	etcdutlPeer = &peer{name: "etcdutl"}
	kinePeer    = &peer{name: "kine"}
)

// EtcdBinary is etcd v3.6 built by scripts/peers.sh (cached under
// .cache/peers, so only the first test run on a machine builds it).
func EtcdBinary() (string, error) { return etcdBinary() }

func etcdBinary() (string, error) { return etcdPeer.build() }

// EtcdctlBinary is etcd's own client, etcdctl of the same release as
// EtcdBinary, built and cached by scripts/peers.sh as etcd is.
func EtcdctlBinary() (string, error) { return etcdctlPeer.build() }

// EtcdutlBinary is etcd's offline tool (snapshot restore and status) of
// the same release as EtcdBinary, built and cached by scripts/peers.sh.
func EtcdutlBinary() (string, error) { return etcdutlPeer.build() }

// KineBinary is kine v0.17.5 built by scripts/peers.sh (cached as etcd
// is), for the tests that import from a database kine wrote.
func KineBinary() (string, error) { return kinePeer.build() }

func (p *peer) build() (string, error) {
	p.once.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			p.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "peers.sh"), p.name)
		var stderr LogBuffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			p.err = fmt.Errorf("scripts/peers.sh %s: %v\n%s", p.name, err, stderr.Tail(2000))
			return
		}
		p.path = strings.TrimSpace(string(out))
	})
	return p.path, p.err
}

var (
	pgOnce sync.Once
	pgSrv  *pgtest.Server
	pgErr  error
)

// PostgresServer is the PostgreSQL the tests make their databases on:
// QUANTY_TEST_POSTGRES_DSN's server, or one throwaway cluster per test
// binary, started on first use and removed by Main.
func PostgresServer() (*pgtest.Server, error) { return postgresServer() }

func postgresServer() (*pgtest.Server, error) {
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pgSrv, pgErr = pgtest.Open(ctx)
		if pgErr == nil {
			atExit(pgSrv.Close)
		}
	})
	return pgSrv, pgErr
}

// PostgresCluster is the throwaway PostgreSQL cluster behind
// PostgresServer, for a test that stops and starts PostgreSQL itself. When
// QUANTY_TEST_POSTGRES_DSN names a server instead, there is no cluster to
// stop: the test is skipped loudly, or fails under CI=true (Unavailable).
func PostgresCluster(t testing.TB) *pgtest.Cluster {
	t.Helper()
	srv, err := postgresServer()
	if err != nil {
		Unavailable(t, "PostgreSQL", err)
	}
	if srv.Cluster == nil {
		Unavailable(t, "PostgreSQL cluster", fmt.Errorf("this test stops and starts PostgreSQL: it needs the throwaway cluster, but %s names a server", pgtest.EnvDSN))
	}
	return srv.Cluster
}

var (
	myOnce sync.Once
	mySrv  *mytest.Server
	myErr  error
)

// MySQLServer is the MariaDB the MySQL backend creates its databases on,
// one per test binary, started on first use and stopped by Main.
func MySQLServer() (*mytest.Server, error) { return mysqlServer() }

func mysqlServer() (*mytest.Server, error) {
	myOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		mySrv, myErr = mytest.Open(ctx)
		if myErr == nil {
			atExit(mySrv.Close)
		}
	})
	return mySrv, myErr
}

// MySQLInstance is the throwaway MariaDB behind MySQLServer, for a test
// that kills and starts MariaDB itself; with QUANTY_TEST_MYSQL_DSN set
// there is none: the test is skipped loudly, or fails under CI=true.
func MySQLInstance(t testing.TB) *mytest.Instance {
	t.Helper()
	srv, err := mysqlServer()
	if err != nil {
		Unavailable(t, "MariaDB", err)
	}
	if srv.Instance == nil {
		Unavailable(t, "MariaDB instance", fmt.Errorf("this test kills and starts MariaDB: it needs the throwaway instance, but %s names a server", mytest.EnvDSN))
	}
	return srv.Instance
}

var (
	pgbOnce sync.Once
	pgb     *pgtest.PgBouncer
	pgbErr  error
)

// PgBouncerServer is the PgBouncer (transaction mode, default settings) in
// front of PostgresServer that the PgBouncer backend connects through, one
// per test binary, started on first use and stopped by Main.
func PgBouncerServer() (*pgtest.PgBouncer, error) { return pgBouncer() }

func pgBouncer() (*pgtest.PgBouncer, error) {
	pgbOnce.Do(func() {
		srv, err := postgresServer()
		if err != nil {
			pgbErr = err
			return
		}
		u, err := url.Parse(srv.AdminDSN)
		if err != nil {
			pgbErr = err
			return
		}
		port, _ := strconv.Atoi(u.Port())
		if port == 0 {
			port = 5432
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pgb, pgbErr = pgtest.StartPgBouncer(ctx, u.Hostname(), port, "transaction")
		if pgbErr == nil {
			atExit(pgb.Destroy)
		}
	})
	return pgb, pgbErr
}
