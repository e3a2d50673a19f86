package framework

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/pgtest"
)

var (
	etcdOnce sync.Once
	etcdPath string
	etcdErr  error
)

// EtcdBinary is etcd v3.6 built by scripts/peers.sh (cached under
// .cache/peers, so only the first test run on a machine builds it).
func EtcdBinary() (string, error) { return etcdBinary() }

func etcdBinary() (string, error) {
	etcdOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			etcdErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "peers.sh"), "etcd")
		var stderr LogBuffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			etcdErr = fmt.Errorf("scripts/peers.sh etcd: %v\n%s", err, stderr.Tail(2000))
			return
		}
		etcdPath = strings.TrimSpace(string(out))
	})
	return etcdPath, etcdErr
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
