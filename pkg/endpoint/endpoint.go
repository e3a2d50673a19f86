// Package server wires a driver and the etcd gRPC services into one
// listening process. cmd/quantykube and the tests start QuantyKube through it.
package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/server"
)

// DefaultEndpoint is where `quantykube serve` keeps its data.
const DefaultEndpoint = "sqlite://./db/state.db"

// DefaultListenAddress is etcd's client port on loopback.
const DefaultListenAddress = "127.0.0.1:2379"

// Config is everything needed to serve. Zero values take the defaults of
// `quantykube serve`.
type Config struct {
	// ListenAddress is host:port ("127.0.0.1:0" picks a free port) or
	// unix:///path/to/socket.
	ListenAddress string
	// Endpoint is the database DSN: sqlite://path (the default,
	// sqlite://./db/state.db) or postgres://...
	Endpoint string
	// Serving TLS, named as etcd names it.
	CertFile, KeyFile, TrustedCAFile string
	ClientCertAuth                   bool
	// MaxRequestBytes bounds one request; 0 means 1.5 MiB.
	MaxRequestBytes int
	// WatchProgressNotifyInterval is how often watchers created with
	// progress_notify hear the current revision; 0 means etcd's 10 minutes.
	WatchProgressNotifyInterval time.Duration
	// Retain keeps history this long (0: forever); RetainPrefixes override
	// it under a key prefix. Each is 0 or at least 75 s.
	Retain         time.Duration
	RetainPrefixes []mvcc.RetentionRule
	// PruneInterval is how often retention runs (default 30 s).
	PruneInterval time.Duration
	// CacheBytes budgets the in-memory copy of the live keys that answers
	// latest-revision reads on SQLite: 0 takes the default (256 MiB), a
	// negative value turns it off.
	CacheBytes int64
	// Now is the store's clock: commit times and retention windows. Tests
	// set it to move time; nil is the wall clock.
	Now func() time.Time
	// MetricsListenAddress, when set, serves Prometheus metrics at
	// http://ADDRESS/metrics.
	MetricsListenAddress string
	// ShutdownTimeout bounds how long Close waits for in-flight requests.
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	// DatastoreMaxOpenConns bounds the read pool of a postgres:// endpoint
	// (0: the default, max(8, 4*GOMAXPROCS)).
	DatastoreMaxOpenConns int
	// DatastoreStatementTimeout is PostgreSQL's statement_timeout for our
	// sessions (0: the server's setting).
	DatastoreStatementTimeout time.Duration
}

// Server is a running QuantyKube.
type Server struct {
	cfg       Config
	store     *mvcc.Store
	grpc      *grpc.Server
	lis       net.Listener
	url       string
	done      chan struct{}
	serveErr  chan error
	metrics   *http.Server
	closeOnce sync.Once
	closeErr  error
}

// OpenStore opens the database a DSN names.
func OpenStore(ctx context.Context, dsn string, opts mvcc.Options) (*mvcc.Store, error) {
	return openStore(ctx, Config{Endpoint: dsn}, opts)
}

func openStore(ctx context.Context, cfg Config, opts mvcc.Options) (*mvcc.Store, error) {
	dsn := cfg.Endpoint
	var d mvcc.Dialect
	switch {
	case strings.HasPrefix(dsn, "sqlite://"):
		sd, err := sqlite.New(dsn)
		if err != nil {
			return nil, err
		}
		d = sd
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		pd, err := postgres.New(dsn, postgres.Options{MaxOpenConns: cfg.DatastoreMaxOpenConns, StatementTimeout: cfg.DatastoreStatementTimeout})
		if err != nil {
			return nil, err
		}
		d = pd
	default:
		return nil, errors.New("endpoint: unknown scheme (want sqlite://path or postgres://...)")
	}
	return mvcc.Open(ctx, d, opts)
}

// Start opens the database and starts serving; it returns once the
// listener accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	if cfg.ListenAddress == "" {
		cfg.ListenAddress = DefaultListenAddress
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	tlsConf, err := serverTLS(cfg)
	if err != nil {
		return nil, err
	}
	lis, url, err := listen(cfg.ListenAddress, tlsConf != nil)
	if err != nil {
		return nil, err
	}
	store, err := openStore(ctx, cfg, mvcc.Options{
		Logger:         cfg.Logger,
		Retain:         cfg.Retain,
		RetainPrefixes: cfg.RetainPrefixes,
		PruneInterval:  cfg.PruneInterval,
		CacheBytes:     cfg.CacheBytes,
		Now:            cfg.Now,
	})
	if err != nil {
		lis.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, store: store, lis: lis, url: url, done: make(chan struct{}), serveErr: make(chan error, 1)}
	ep := server.New(server.Config{
		Store:                  store,
		Logger:                 cfg.Logger,
		MaxRequestBytes:        cfg.MaxRequestBytes,
		ClientURLs:             []string{url},
		ProgressNotifyInterval: cfg.WatchProgressNotifyInterval,
		Done:                   s.done,
	})
	opts := append(ep.GRPCOptions(),
		// kube-apiserver pings every 30 s; etcd permits pings 5 s apart.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
	)
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	s.grpc = grpc.NewServer(opts...)
	ep.Register(s.grpc)
	history.New(store).Register(s.grpc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, hs)
	metrics.SetSource(store)
	if cfg.MetricsListenAddress != "" {
		ml, err := net.Listen("tcp", cfg.MetricsListenAddress)
		if err != nil {
			lis.Close()
			store.Close()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go s.metrics.Serve(ml)
		cfg.Logger.Info("serving metrics", "listen", "http://"+ml.Addr().String()+"/metrics")
	}
	go func() { s.serveErr <- s.grpc.Serve(lis) }()
	cfg.Logger.Info("serving etcd v3 API", "listen", url, "endpoint", redactDSN(cfg.Endpoint), "revision", store.Rev())
	return s, nil
}

// Store is the server's revision log.
func (s *Server) Store() *mvcc.Store { return s.store }

// ClientURL is what an etcd client dials: http://host:port, https://host:port
// when TLS is on, or unix:///path.
func (s *Server) ClientURL() string { return s.url }

// Wait returns when the gRPC server stops serving.
func (s *Server) Wait() error { return <-s.serveErr }

// Close stops accepting, ends watch streams, lets in-flight requests and
// their commits finish, and closes the database.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		stopped := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(s.cfg.ShutdownTimeout):
			s.cfg.Logger.Warn("graceful stop timed out; closing connections")
			s.grpc.Stop()
			<-stopped
		}
		// The store finishes every request already queued before closing.
		if s.metrics != nil {
			s.metrics.Close()
		}
		s.closeErr = s.store.Close()
	})
	return s.closeErr
}

func listen(addr string, secure bool) (net.Listener, string, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, "", fmt.Errorf("listen %s: %w", addr, err)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, "", fmt.Errorf("listen %s: %w", addr, err)
		}
		return l, "unix://" + path, nil
	}
	hostport := addr
	for _, p := range []string{"http://", "https://"} {
		hostport = strings.TrimPrefix(hostport, p)
	}
	l, err := net.Listen("tcp", hostport)
	if err != nil {
		return nil, "", fmt.Errorf("listen %s: %w", addr, err)
	}
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	return l, scheme + l.Addr().String(), nil
}

func serverTLS(cfg Config) (*tls.Config, error) {
	if cfg.CertFile == "" && cfg.KeyFile == "" {
		if cfg.ClientCertAuth || cfg.TrustedCAFile != "" {
			return nil, errors.New("--client-cert-auth and --trusted-ca-file need --cert-file and --key-file")
		}
		return nil, nil
	}
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if cfg.TrustedCAFile != "" {
		pem, err := os.ReadFile(cfg.TrustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("--trusted-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--trusted-ca-file %s: no certificates found", cfg.TrustedCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if cfg.ClientCertAuth {
		if tc.ClientCAs == nil {
			return nil, errors.New("--client-cert-auth needs --trusted-ca-file")
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// redactDSN hides a password in an endpoint URL before it is logged.
func redactDSN(dsn string) string {
	if strings.HasPrefix(dsn, "sqlite://") {
		return dsn
	}
	u, err := neturl.Parse(dsn)
	if err != nil {
		return "(unparsable endpoint)"
	}
	return u.Redacted()
}
