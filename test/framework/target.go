package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	qtls "github.com/quantyroot/quantykube/pkg/tls"
	"github.com/quantyroot/quantykube/test/mytest"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// Options shape a target. The zero value is one QuantyKube in this process
// (one etcd process for Etcd) with endpoint.Config's defaults (history kept
// forever); QuantyKube processes run with `quantykube serve`'s (24 hours).
type Options struct {
	// Process runs QuantyKube as child processes of the quantykube binary
	// instead of in this process: Kill needs it. etcd is always a process.
	Process bool
	// Replicas is how many QuantyKube processes serve the one database
	// (Postgres with Process only; default 1).
	Replicas int
	// ProgressNotifyInterval is the watch progress_notify period on every
	// backend (0: the backend's default, etcd's 10 minutes).
	ProgressNotifyInterval time.Duration
	// Config adjusts an in-process QuantyKube's configuration after the
	// framework has set its listener (127.0.0.1:0), database and logger (a
	// clock, retention rules, the live index, a unix socket or TLS
	// listener). A restart listens where the first start did.
	Config func(*endpoint.Config)
	// StartConfig adjusts an in-process QuantyKube's configuration at each
	// start, after Config, and EtcdArgs are extra etcd flags, asked for at
	// each start: what a test changes between restarts (a quota).
	StartConfig func(*endpoint.Config)
	EtcdArgs    func() []string
	// Args are extra `quantykube serve` flags for QuantyKube processes.
	Args []string
	// Bin is the quantykube binary for processes (default: Binary).
	Bin string
	// Netns runs QuantyKube processes inside this network namespace (with
	// `ip netns exec`), listening on Host: a test that made the namespace
	// reaches them through it, as another host's would.
	Netns string
	// Host is the address QuantyKube processes listen on (default
	// 127.0.0.1).
	Host string
	// Env is added to the environment of QuantyKube processes.
	Env []string
	// Endpoint, when set, rewrites the database endpoint every replica
	// serves: a SQLite file in another directory (a test file system), a
	// PostgreSQL server reached through a proxy. The database itself is
	// made and dropped where the framework made it.
	Endpoint func(endpoint string) string
	// TLS serves every backend over TLS with client certificates
	// required, as etcd's --client-cert-auth; the framework's clients
	// present TLS's client certificate.
	TLS *TLSFiles
}

// TLSFiles are the certificates of a TLS target (NewCA and Issue make them).
type TLSFiles struct {
	// CAFile signs the server's certificate and the client certificates
	// the server accepts.
	CAFile                string
	CertFile, KeyFile     string // the server's, for 127.0.0.1
	ClientCert, ClientKey string // the framework's clients'
}

// ClientConfig is the TLS configuration of the framework's clients.
func (f *TLSFiles) ClientConfig() (*tls.Config, error) {
	if f == nil {
		return nil, nil
	}
	return qtls.Config{CAFile: f.CAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey}.ClientConfig()
}

// Target is a server under test across its restarts: one or more replicas
// (members) on one database or data directory. Its methods fail the test
// that calls them on any error.
type Target struct {
	backend Backend
	dsn     string // QuantyKube: the database every replica serves
	tls     *tls.Config
	members []*member
}

// Start starts a fresh, empty server of backend b and stops it when t ends.
// It returns once every replica answers a Status call.
func Start(t testing.TB, b Backend, o Options) *Target {
	t.Helper()
	Require(t, b)
	x := &Target{backend: b}
	var err error
	if x.tls, err = o.TLS.ClientConfig(); err != nil {
		t.Fatalf("framework: TLS: %v", err)
	}
	dir := t.TempDir()
	n := 1
	switch b {
	case SQLite:
		x.dsn = "sqlite://" + filepath.Join(dir, "state.db")
	case Postgres:
		// Made before the stop cleanup below is registered, so that the
		// database is dropped only after every replica has stopped
		// (cleanups run last-in, first-out).
		x.dsn = newDatabase(t)
		if o.Process && o.Replicas > 1 {
			n = o.Replicas
		}
	case PgBouncer:
		x.dsn = newDatabase(t)
		pgb, err := pgBouncer()
		if err != nil {
			Unavailable(t, "PgBouncer", err)
		}
		if x.dsn, err = pgb.Through(x.dsn); err != nil {
			t.Fatalf("framework: %v", err)
		}
		if o.Process && o.Replicas > 1 {
			n = o.Replicas
		}
	case MySQL:
		x.dsn = newMySQLDatabase(t)
		if o.Process && o.Replicas > 1 {
			n = o.Replicas
		}
	case Etcd:
		x.members = []*member{newEtcdMember(t, dir, o, x.tls)}
	}
	if o.Endpoint != nil && b.IsQuantyKube() {
		x.dsn = o.Endpoint(x.dsn)
	}
	if b.IsQuantyKube() {
		if o.Replicas > 1 && !(b.IsShared() && o.Process) {
			t.Fatalf("framework: %d replicas need a shared database (Postgres, PgBouncer, MySQL) with Options.Process", o.Replicas)
		}
		for i := range n {
			name := "quantykube"
			if n > 1 {
				name = fmt.Sprintf("replica-%d", i)
			}
			x.members = append(x.members, newQuantyMember(t, name, x.dsn, o, x.tls))
		}
	}
	t.Cleanup(func() {
		for _, m := range x.members {
			if err := m.stop(); err != nil {
				t.Errorf("%s: stop: %v", m.name, err)
			}
		}
		if t.Failed() {
			for _, m := range x.members {
				// Empty when Options.Config sent the log elsewhere.
				if tail := m.log.Tail(6000); tail != "" {
					t.Logf("%s log (tail):\n%s", m.name, tail)
				}
			}
		}
	})
	x.Start(t)
	return x
}

// PostgresDatabase is a new, empty database on PostgresServer, dropped
// when t ends: for a server the test starts itself (StartKine).
func PostgresDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t)
}

func newDatabase(t testing.TB) string {
	t.Helper()
	srv, err := postgresServer()
	if err != nil {
		Unavailable(t, "PostgreSQL", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := pgtest.CreateDatabase(ctx, srv.AdminDSN, t.Name())
	if err != nil {
		t.Fatalf("postgres test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pgtest.DropDatabase(ctx, srv.AdminDSN, dsn)
	})
	return dsn
}

// MySQLDatabase is a new, empty database on MySQLServer, dropped when t
// ends: for a server the test starts itself (StartKine).
func MySQLDatabase(t testing.TB) string {
	t.Helper()
	return newMySQLDatabase(t)
}

func newMySQLDatabase(t testing.TB) string {
	t.Helper()
	srv, err := mysqlServer()
	if err != nil {
		Unavailable(t, "MariaDB", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := mytest.CreateDatabase(ctx, srv.AdminDSN, t.Name())
	if err != nil {
		t.Fatalf("mysql test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = mytest.DropDatabase(ctx, srv.AdminDSN, dsn)
	})
	return dsn
}

// Backend is what the target runs.
func (x *Target) Backend() Backend { return x.backend }

// DSN is the database a QuantyKube or kine target serves ("" for etcd).
func (x *Target) DSN() string { return x.dsn }

// Replicas is the number of members.
func (x *Target) Replicas() int { return len(x.members) }

// Endpoints are the client URLs of every replica, in order.
func (x *Target) Endpoints() []string {
	out := make([]string, len(x.members))
	for i, m := range x.members {
		out[i] = m.url
	}
	return out
}

// Endpoint is the first replica's client URL.
func (x *Target) Endpoint() string { return x.members[0].url }

// EtcdDataDir is an etcd target's data directory, where its WAL is.
func (x *Target) EtcdDataDir() string { return x.members[0].dataDir }

// Server is the in-process QuantyKube server (nil for processes and etcd,
// or while stopped).
func (x *Target) Server() *endpoint.Server { return x.members[0].srv }

// Log is replica i's log.
func (x *Target) Log(i int) *LogBuffer { return x.members[i].log }

// Client is an etcd client of the first replica, closed when t ends.
func (x *Target) Client(t testing.TB) *clientv3.Client { return x.ReplicaClient(t, 0) }

// ReplicaClient is an etcd client of replica i, closed when t ends. A
// client made before a restart must not be used after it: the address
// may change.
func (x *Target) ReplicaClient(t testing.TB, i int) *clientv3.Client {
	t.Helper()
	cli, err := newClient(x.tls, x.members[i].url)
	if err != nil {
		t.Fatalf("client of %s: %v", x.members[i].name, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// NewClient is an etcd client of urls with the framework's timeouts.
func NewClient(urls ...string) (*clientv3.Client, error) { return newClient(nil, urls...) }

// NewTLSClient is NewClient with a TLS configuration (nil: none).
func NewTLSClient(tc *tls.Config, urls ...string) (*clientv3.Client, error) {
	return newClient(tc, urls...)
}

func newClient(tc *tls.Config, urls ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            urls,
		TLS:                  tc,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
}

// ClientTLS is the TLS configuration the target's clients need (nil for a
// plain target).
func (x *Target) ClientTLS() *tls.Config { return x.tls }

// PID is the process ID of replica i (0 for an in-process server or a
// stopped one).
func (x *Target) PID(i int) int {
	if m := x.members[i]; m.running() {
		return m.cmd.Process.Pid
	}
	return 0
}

// Start starts every stopped replica on the same data, each on its
// previous address while that is free, and waits until each answers.
func (x *Target) Start(t testing.TB) {
	t.Helper()
	for i := range x.members {
		x.StartReplica(t, i)
	}
}

// StartReplica starts replica i (if it is stopped) and waits until it answers.
func (x *Target) StartReplica(t testing.TB, i int) {
	t.Helper()
	if err := x.members[i].start(); err != nil {
		t.Fatalf("%s: %v\n%s", x.members[i].name, err, x.members[i].log.Tail(4000))
	}
}

// Stop stops every replica gracefully (SIGTERM, then SIGKILL after 15 s).
func (x *Target) Stop(t testing.TB) {
	t.Helper()
	for i := range x.members {
		x.StopReplica(t, i)
	}
}

// StopReplica stops replica i gracefully.
func (x *Target) StopReplica(t testing.TB, i int) {
	t.Helper()
	if err := x.members[i].stop(); err != nil {
		t.Fatalf("%s: stop: %v", x.members[i].name, err)
	}
}

// Restart stops and starts every replica.
func (x *Target) Restart(t testing.TB) {
	t.Helper()
	x.Stop(t)
	x.Start(t)
}

// Kill sends SIGKILL to every replica and waits for it to exit. Only
// processes can be killed: an in-process target fails the test.
func (x *Target) Kill(t testing.TB) {
	t.Helper()
	for i := range x.members {
		x.KillReplica(t, i)
	}
}

// KillReplica sends SIGKILL to replica i.
func (x *Target) KillReplica(t testing.TB, i int) {
	t.Helper()
	if err := x.members[i].kill(); err != nil {
		t.Fatalf("%s: %v", x.members[i].name, err)
	}
}

// Exited reports whether replica i's process has exited on its own.
func (x *Target) Exited(i int) bool {
	m := x.members[i]
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

// member is one replica: a QuantyKube in this process, or a process.
type member struct {
	name string
	log  *LogBuffer
	addr string // host:port, kept across restarts while it is free
	url  string

	// In-process QuantyKube.
	cfg         *endpoint.Config
	startConfig func(*endpoint.Config)
	srv         *endpoint.Server

	// A process: argv builds its arguments for a client address; fresh
	// picks new ports (etcd's peer port) when the old ones were taken;
	// wrap runs it inside a network namespace, listening on host.
	bin    string
	wrap   []string
	host   string
	argv   func(addr string) []string
	env    []string
	scheme string // of the client URL: http or https
	tls    *tls.Config
	fresh  func()
	// dataDir is etcd's --data-dir.
	dataDir string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error // Wait's result, once exited is closed
}

func newQuantyMember(t testing.TB, name, dsn string, o Options, tc *tls.Config) *member {
	m := &member{name: name, log: &LogBuffer{}, scheme: "http", tls: tc}
	if o.TLS != nil {
		m.scheme = "https"
	}
	if !o.Process {
		cfg := endpoint.Config{
			Listener:       "127.0.0.1:0",
			Endpoint:       dsn,
			NotifyInterval: o.ProgressNotifyInterval,
			Logger:         slog.New(slog.NewTextHandler(m.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		}
		if o.TLS != nil {
			cfg.ServerTLSConfig = qtls.Config{CertFile: o.TLS.CertFile, KeyFile: o.TLS.KeyFile, TrustedCAFile: o.TLS.CAFile}
		}
		if o.Config != nil {
			o.Config(&cfg)
		}
		m.cfg, m.startConfig = &cfg, o.StartConfig
		return m
	}
	m.bin = o.Bin
	if m.bin == "" {
		m.bin = Binary(t)
	}
	m.host = o.Host
	if o.Netns != "" {
		m.wrap = []string{"ip", "netns", "exec", o.Netns}
	}
	m.env = o.Env
	m.argv = func(addr string) []string {
		args := []string{"serve", "--listen-address", addr, "--endpoint", dsn}
		if o.ProgressNotifyInterval > 0 {
			args = append(args, "--watch-progress-notify-interval", o.ProgressNotifyInterval.String())
		}
		if o.TLS != nil {
			args = append(args, "--cert-file", o.TLS.CertFile, "--key-file", o.TLS.KeyFile, "--trusted-ca-file", o.TLS.CAFile, "--client-cert-auth")
		}
		return append(args, o.Args...)
	}
	return m
}

func newEtcdMember(t testing.TB, dir string, o Options, tc *tls.Config) *member {
	bin, err := etcdBinary()
	if err != nil {
		Unavailable(t, "etcd", err)
	}
	m := &member{name: "etcd", log: &LogBuffer{}, bin: bin, scheme: "http", tls: tc, dataDir: filepath.Join(dir, "etcd")}
	if o.TLS != nil {
		m.scheme = "https"
	}
	var peer string
	m.fresh = func() { peer = freeAddr() }
	m.fresh()
	progress := o.ProgressNotifyInterval
	if progress <= 0 {
		progress = 10 * time.Minute
	}
	m.argv = func(addr string) []string {
		curl, purl := m.scheme+"://"+addr, "http://"+peer
		args := []string{
			"--name", "default",
			"--data-dir", m.dataDir,
			"--listen-client-urls", curl,
			"--advertise-client-urls", curl,
			"--listen-peer-urls", purl,
			"--initial-advertise-peer-urls", purl,
			"--initial-cluster", "default=" + purl,
			"--watch-progress-notify-interval", progress.String(),
			// Tests kill processes, never the machine: fsync buys nothing.
			"--unsafe-no-fsync",
			"--log-level", "warn",
		}
		if o.TLS != nil {
			args = append(args, "--cert-file", o.TLS.CertFile, "--key-file", o.TLS.KeyFile, "--trusted-ca-file", o.TLS.CAFile, "--client-cert-auth")
		}
		if o.EtcdArgs != nil {
			args = append(args, o.EtcdArgs()...)
		}
		return args
	}
	return m
}

// Kine is the target StartKine makes: kine, not a Backend the suites run
// on (it serves only the requests kube-apiserver makes), but a source the
// import tests write through.
const Kine Backend = "kine"

// StartKine starts kine (KineBinary) on the database dsn, sqlite://PATH or
// a postgres:// URL, and stops it when t ends. It returns once kine
// answers a Status call; Stop and Start keep the database.
func StartKine(t testing.TB, dsn string) *Target {
	t.Helper()
	bin, err := KineBinary()
	if err != nil {
		Unavailable(t, "kine", err)
	}
	m := &member{name: "kine", log: &LogBuffer{}, bin: bin, scheme: "http"}
	m.argv = func(addr string) []string {
		// Metrics off ("0"): kine's default port would collide between tests.
		return []string{"--listen-address", addr, "--endpoint", dsn, "--metrics-bind-address", "0"}
	}
	x := &Target{backend: Kine, dsn: dsn, members: []*member{m}}
	t.Cleanup(func() {
		if err := m.stop(); err != nil {
			t.Errorf("kine: stop: %v", err)
		}
		if t.Failed() {
			t.Logf("kine log (tail):\n%s", m.log.Tail(6000))
		}
	})
	x.Start(t)
	return x
}

// start starts the member if it is stopped. A process whose port was
// taken between choosing it and binding it is started again on new ports.
func (m *member) start() error {
	if m.srv != nil || m.running() {
		return nil
	}
	if m.cfg != nil {
		return m.startInProcess()
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if m.addr == "" || attempt > 0 {
			m.addr = m.pickAddr()
			if m.fresh != nil && attempt > 0 {
				m.fresh()
			}
		}
		if lastErr = m.startProcess(); lastErr == nil {
			return nil
		}
		_ = m.kill()
	}
	return lastErr
}

func (m *member) startInProcess() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := *m.cfg
	if m.startConfig != nil {
		m.startConfig(&cfg)
	}
	if m.addr != "" {
		cfg.Listener = m.addr
	}
	srv, err := endpoint.Start(ctx, cfg)
	if err != nil && m.addr != "" {
		// The old port may have been taken meanwhile.
		cfg.Listener = m.cfg.Listener
		srv, err = endpoint.Start(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("endpoint.Start: %w", err)
	}
	m.srv, m.url = srv, srv.ClientURL()
	if u, err := url.Parse(m.url); err == nil && u.Host != "" {
		m.addr = u.Host
	}
	return nil
}

func (m *member) startProcess() error {
	args := append(append(m.wrap[:len(m.wrap):len(m.wrap)], m.bin), m.argv(m.addr)...)
	fmt.Fprintf(m.log, "\n===== %s\n", strings.Join(args, " "))
	// `ip netns exec` execs the server in its place: the pid is the server's.
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if len(m.env) > 0 {
		cmd.Env = append(os.Environ(), m.env...)
	}
	// A test binary killed by its timeout must not leave servers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.bin, err)
	}
	scheme := m.scheme
	if scheme == "" {
		scheme = "http"
	}
	m.cmd, m.exited, m.url = cmd, make(chan struct{}), scheme+"://"+m.addr
	go func(done chan struct{}) { m.err = cmd.Wait(); close(done) }(m.exited)
	return m.waitReady()
}

// waitReady waits until the member answers a Status call.
func (m *member) waitReady() error {
	cli, err := newClient(m.tls, m.url)
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-m.exited:
			return fmt.Errorf("exited at start: %v", m.err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Status(ctx, m.url)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (m *member) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

func (m *member) stop() error {
	if m.srv != nil {
		err := m.srv.Close()
		m.srv = nil
		return err
	}
	if m.cmd == nil {
		return nil
	}
	defer func() { m.cmd = nil }()
	select {
	case <-m.exited:
		return nil // it had exited already (or was killed)
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		var ee *exec.ExitError
		if m.err != nil && !errors.As(m.err, &ee) {
			return m.err
		}
		return nil
	case <-time.After(15 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
		return errors.New("did not stop within 15s of SIGTERM; killed")
	}
}

func (m *member) kill() error {
	if m.cfg != nil {
		return errors.New("an in-process server cannot be killed: start the target with Options.Process")
	}
	if m.cmd == nil {
		return nil
	}
	defer func() { m.cmd = nil }()
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-m.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pid %d did not exit 10s after SIGKILL", m.cmd.Process.Pid)
	}
}

// pickAddr is the address to start on: a free loopback port, or a port in
// the test's network namespace, where nothing else listens (a taken one is
// retried by start).
func (m *member) pickAddr() string {
	if m.host == "" || m.host == "127.0.0.1" {
		return freeAddr()
	}
	return net.JoinHostPort(m.host, strconv.Itoa(20000+rand.IntN(12000)))
}

// freeAddr is a loopback host:port that was free a moment ago; a server
// that then fails to bind it is started again on another (member.start).
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "framework: no free loopback port: %v\n", err)
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}

// FreeAddr is a loopback host:port that was free a moment ago, for the
// servers a test starts itself. Another process may take it first.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
