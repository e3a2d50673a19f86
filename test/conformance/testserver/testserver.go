// Package testserver is a drop-in replacement for
// k8s.io/apiserver/pkg/storage/etcd3/testserver. scripts/conformance.sh
// rewrites the import of that package in a scratch copy of k8s.io/apiserver
// to this one, so Kubernetes' own storage test suite runs, unmodified,
// against QuantyKube.
//
// It keeps the upstream API exactly:
//
//	func NewTestConfig(t testing.TB) *embed.Config
//	func RunEtcd(t testing.TB, cfg *embed.Config) *kubernetes.Client
//
// The *embed.Config is only a carrier of the settings the suite tweaks
// (WatchProgressNotifyInterval, client TLS); RunEtcd translates them into
// an endpoint.Config and starts QuantyKube in-process on a fresh SQLite
// file through test/framework, the one way QuantyKube's suites start it.
//
// Setting QUANTYKUBE_CONFORMANCE_BACKEND=etcd starts a real embedded etcd
// instead: the reference run that proves the harness itself is sound.
// QUANTYKUBE_CONFORMANCE_BACKEND=postgres starts QuantyKube on a fresh
// PostgreSQL database per test, made on the server QUANTY_TEST_POSTGRES_DSN
// names (scripts/conformance.sh starts a throwaway cluster for it;
// framework.PostgresServer honours the variable).
package testserver

import (
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	storagetesting "k8s.io/apiserver/pkg/storage/testing"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/mytest"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// BackendEnv selects what RunEtcd starts: "quantykube" (default, SQLite),
// "postgres" (QuantyKube on PostgreSQL), "pgbouncer" (QuantyKube on
// PostgreSQL through PgBouncer in transaction mode), "mysql" (QuantyKube on
// MariaDB) or "etcd".
const BackendEnv = "QUANTYKUBE_CONFORMANCE_BACKEND"

func backend(t testing.TB) string {
	switch b := os.Getenv(BackendEnv); b {
	case "", "quantykube":
		return "quantykube"
	case "etcd", "postgres", "pgbouncer", "mysql":
		return b
	default:
		t.Fatalf("%s=%q: want quantykube, postgres, pgbouncer, mysql or etcd", BackendEnv, b)
		return ""
	}
}

// NewTestConfig returns the configuration RunEtcd starts a server from:
// embed.NewConfig() with loopback-only client and peer URLs on free ports,
// a per-test data directory and fsync off (the etcd backend uses all of it;
// the QuantyKube backend reads only the fields RunEtcd documents).
func NewTestConfig(t testing.TB) *embed.Config {
	cfg := embed.NewConfig()
	cfg.UnsafeNoFsync = true

	ports := freeLoopbackPorts(t, 2)
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(
		zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-server"))
	cfg.Dir = t.TempDir()
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// freeLoopbackPorts reserves n distinct free ports on 127.0.0.1. They are
// released before returning, so another process could in principle take
// one; startLock serialises our own users of auto-picked ports.
func freeLoopbackPorts(t testing.TB, n int) []int {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("reserving a loopback port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

var startLock sync.Mutex

// RunEtcd starts a server for cfg (NewTestConfig(t) when nil) and returns a
// client for it, wrapped in the suite's call recorders exactly as upstream
// does. The server stops when the test ends.
func RunEtcd(t testing.TB, cfg *embed.Config) *kubernetes.Client {
	t.Helper()
	if cfg == nil {
		startLock.Lock()
		defer startLock.Unlock()
		cfg = NewTestConfig(t)
	}

	var endpoints []string
	switch backend(t) {
	case "etcd":
		endpoints = startEtcd(t, cfg)
	default:
		endpoints = startQuantyKube(t, cfg)
	}

	ccfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	}
	if !cfg.ClientTLSInfo.Empty() {
		tlsConfig, err := cfg.ClientTLSInfo.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		ccfg.TLS = tlsConfig
	}
	client, err := kubernetes.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })

	recorder := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	client.KV = storagetesting.NewKVRecorder(client.KV, recorder)
	client.Kubernetes = recorder
	return client
}

// startEtcd is the reference backend: a real single-member etcd.
func startEtcd(t testing.TB, cfg *embed.Config) []string {
	t.Helper()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		t.Fatal("embedded etcd took too long to start")
	}
	go func() {
		if err := <-e.Err(); err != nil {
			t.Error(err)
		}
	}()
	return e.Server.Cluster().ClientURLs()
}

// startQuantyKube starts QuantyKube in-process through test/framework on a
// fresh SQLite file (a fresh PostgreSQL or MariaDB database for the postgres,
// pgbouncer and mysql backends),
// as QuantyKube's own suites do. From cfg it honours the client TLS
// settings and WatchProgressNotifyInterval.
func startQuantyKube(t testing.TB, cfg *embed.Config) []string {
	t.Helper()
	b := framework.SQLite
	if backend(t) == "mysql" {
		// As for PostgreSQL: the server comes from scripts/conformance.sh.
		if os.Getenv(mytest.EnvDSN) == "" {
			t.Fatalf("%s=mysql needs %s", BackendEnv, mytest.EnvDSN)
		}
		b = framework.MySQL
	}
	if be := backend(t); be == "postgres" || be == "pgbouncer" {
		// The suite's TestMain is upstream's, so nothing here could remove
		// a throwaway cluster the framework started: the server comes from
		// scripts/conformance.sh. The framework's PgBouncer ends with this
		// process (pgtest.StartPgBouncer: Pdeathsig).
		if os.Getenv(pgtest.EnvDSN) == "" {
			t.Fatalf("%s=%s needs %s", BackendEnv, be, pgtest.EnvDSN)
		}
		b = framework.Postgres
		if be == "pgbouncer" {
			b = framework.PgBouncer
		}
	}
	logs := &testLogWriter{t: t}
	// Registered before the server's own cleanup, so it runs after the
	// server has stopped (cleanups are LIFO).
	t.Cleanup(logs.stop)
	x := framework.Start(t, b, framework.Options{Config: func(scfg *endpoint.Config) {
		scfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if tls := cfg.ClientTLSInfo; !tls.Empty() {
			// A trusted CA requires client certificates, as etcd's does.
			scfg.ServerTLSConfig.CertFile, scfg.ServerTLSConfig.KeyFile, scfg.ServerTLSConfig.TrustedCAFile = tls.CertFile, tls.KeyFile, tls.TrustedCAFile
		}
		if cfg.WatchProgressNotifyInterval != embed.NewConfig().WatchProgressNotifyInterval {
			scfg.NotifyInterval = cfg.WatchProgressNotifyInterval
		}
	}})
	return x.Endpoints()
}

// testLogWriter sends server logs to t.Log until stop; afterwards (a
// goroutine logging after the test ended) it writes to stderr, since t.Log
// would panic then.
type testLogWriter struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return os.Stderr.Write(p)
	}
	w.t.Log("quantykube: " + string(trimNewline(p)))
	return len(p), nil
}

func (w *testLogWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

func trimNewline(p []byte) []byte {
	if n := len(p); n > 0 && p[n-1] == '\n' {
		return p[:n-1]
	}
	return p
}
