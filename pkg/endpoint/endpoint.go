// Package endpoint is how a program embeds QuantyKube, as k3s embeds kine:
// Listen starts serving the etcd v3 API (and quantykube.History) from a
// database and returns the ETCDConfig an etcd client such as kube-apiserver
// connects with. Config, ETCDConfig and Listen keep kine's names and
// meanings, so a program written against kine's pkg/endpoint (with its
// pkg/tls and pkg/drivers/generic) builds against QuantyKube by changing
// the module path. Start is the same server with a handle to stop it, for
// cmd/quantykube and the tests.
package endpoint

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/server"
	"github.com/quantyroot/quantykube/pkg/tls"
)

const (
	// KineSocket is the listener when Config.Listener is empty, as kine's.
	KineSocket = "unix://kine.sock"
	// DefaultEndpoint is the database when Config.Endpoint is empty: the
	// SQLite file kine uses by default.
	DefaultEndpoint = "sqlite://./db/state.db"
	// GracefulStopTimeout bounds how long Listen's server lets in-flight
	// requests finish once its context ends.
	GracefulStopTimeout = 10 * time.Second
)

// Config configures a server. The fields up to EmulatedETCDVersion, and
// the compaction and polling settings after them, are kine's, with kine's
// meanings; the rest, from MaxRequestBytes on, are QuantyKube's own. A
// zero field takes the default its comment names, which is not always
// `quantykube serve`'s: a zero Retain keeps history forever, where serve
// keeps 24 hours, and a zero Listener is kine's socket.
type Config struct {
	// GRPCServer, when set, is the server the services are registered on
	// and that serves the listener; its own options then apply (request
	// size, keepalive). Nil builds one with etcd's options.
	GRPCServer *grpc.Server
	// WaitGroup, when set, is held until the server has stopped after
	// Listen's context ended.
	WaitGroup *sync.WaitGroup
	// Listener is where to serve: "host:port", "tcp://host:port",
	// "http://host:port" or "unix://path" (empty: KineSocket).
	Listener string
	// Endpoint is the database: "sqlite://path" or a bare path (SQLite),
	// "postgres://..." or "postgresql://..." (PostgreSQL), "mysql://..."
	// (MySQL or MariaDB, in kine's forms), empty for
	// DefaultEndpoint. An etcd URL ("http://", "https://", "unix://") is
	// not served: Listen returns it in ETCDConfig for the caller to use
	// directly, as kine does.
	Endpoint string
	// ConnectionPoolConfig sizes the database's read pool (zero MaxOpen
	// takes the dialect's default, where kine's means unlimited).
	ConnectionPoolConfig generic.ConnectionPoolConfig
	// ServerTLSConfig is the serving certificate; TrustedCAFile requires
	// client certificates signed by it.
	ServerTLSConfig tls.Config
	// BackendTLSConfig is the client certificate and CA for the database
	// (PostgreSQL's sslcert, sslkey and sslrootcert; MySQL's TLS), unless
	// the endpoint URL names them itself.
	BackendTLSConfig tls.Config
	// MetricsRegisterer, when set, also gets QuantyKube's collectors.
	MetricsRegisterer prometheus.Registerer
	// HealthWarnings are reported by /readyz?verbose and never fail it
	// (health.go).
	HealthWarnings []HealthWarning
	// NotifyInterval is how often a watch created with progress_notify
	// hears the current revision (default 10 minutes, as etcd's).
	NotifyInterval time.Duration
	// EmulatedETCDVersion is the etcd version Status reports (default
	// server.Version). kube-apiserver needs 3.5.13 or later for consistent
	// reads from its cache.
	EmulatedETCDVersion string

	// kine's compaction and polling settings, accepted so that programs
	// that set them build; they change nothing here: QuantyKube neither
	// compacts on a timer (Compact records a floor, retention prunes, see
	// Retain) nor polls a single database for changes.
	CompactInterval       time.Duration
	CompactIntervalJitter int
	CompactTimeout        time.Duration
	CompactMinRetain      int64
	CompactBatchSize      int64
	PollBatchSize         int64
	PollInterval          time.Duration
	LogFormat             string

	// MaxRequestBytes bounds one request (default 1.5 MiB, as etcd's).
	MaxRequestBytes int
	// Retain keeps history this long (0: forever); RetainPrefixes override
	// it under a key prefix. Each is 0 or at least 75 s.
	Retain         time.Duration
	RetainPrefixes []mvcc.RetentionRule
	// RetainBytes bounds history by size as well (0: by time only).
	RetainBytes int64
	// PruneInterval is how often retention runs (default 30 s).
	PruneInterval time.Duration
	// RetentionHold, when set, names the lowest revision a consumer still
	// has to read from the log (0: none), which retention keeps
	// (mvcc.Options.Hold): replication's revisions not yet shipped.
	RetentionHold func() int64
	// LiveIndexBytes budgets the in-memory index of the live keys that
	// answers reads at the latest revision (0: the default, 256 MiB; on
	// PostgreSQL each replica keeps one); DisableLiveIndex turns it off.
	// LiveIndexValueBytes bounds the values it holds (0: the default,
	// 8 MiB): the others are read from the database (ADR-041).
	LiveIndexBytes      int64
	LiveIndexValueBytes int64
	DisableLiveIndex    bool
	// QuotaBackendBytes is the space quota, as etcd's
	// --quota-backend-bytes: past this database size, writes that grow
	// the store fail with etcd's NOSPACE error and raise its alarm
	// (ADR-049). 0: none.
	QuotaBackendBytes int64
	// DatastoreStatementTimeout is PostgreSQL's statement_timeout for our
	// sessions, MariaDB's max_statement_time, MySQL's max_execution_time
	// (0: the server's setting).
	DatastoreStatementTimeout time.Duration
	// DatastoreListenEndpoint is a postgres:// URL for the connection that
	// LISTENs for the other replicas' commits, where Endpoint is a pooler
	// that cannot deliver notifications (empty: Endpoint's).
	DatastoreListenEndpoint string
	// SQLitePlainWAL writes SQLite's WAL as SQLite writes it, without
	// gathering the writer's writes (sqlite.Options.PlainWAL, ADR-018).
	SQLitePlainWAL bool
	// MetricsListenAddress, when set, serves Prometheus metrics at
	// http://ADDRESS/metrics, and the health endpoints /livez, /readyz,
	// /healthz (Kubernetes' shape) and /health (etcd's) (health.go).
	MetricsListenAddress string
	// AggregatedAPI, when its Listen is set, also serves History as the
	// Kubernetes aggregated API quanty.quantyroot.io (pkg/apiagg).
	AggregatedAPI apiagg.Config
	// ShutdownTimeout bounds how long Close waits for in-flight requests
	// (default GracefulStopTimeout).
	ShutdownTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Now is the store's clock: commit times and retention windows. Tests
	// set it to move time; nil is the wall clock.
	Now func() time.Time
}

// Server is a running QuantyKube.
type Server struct {
	cfg        Config
	store      *mvcc.Store
	grpc       *grpc.Server
	lis        net.Listener
	url        string
	done       chan struct{}
	serveErr   chan error
	metrics    *http.Server
	clientHTTP *http.Server // HTTP/1 on the client port (split.go)
	api        *apiagg.Server
	closeOnce  sync.Once
	closeErr   error
}

// OpenStore opens the database cfg.Endpoint names, with cfg's pool, TLS
// and store settings, without serving it.
func OpenStore(ctx context.Context, cfg Config) (*mvcc.Store, error) {
	cfg = withDefaults(cfg)
	d, err := dialect(cfg)
	if err != nil {
		return nil, err
	}
	return mvcc.Open(ctx, d, mvcc.Options{
		Logger:              cfg.Logger,
		Retain:              cfg.Retain,
		RetainPrefixes:      cfg.RetainPrefixes,
		RetainBytes:         cfg.RetainBytes,
		PruneInterval:       cfg.PruneInterval,
		Hold:                cfg.RetentionHold,
		LiveIndexBytes:      cfg.LiveIndexBytes,
		LiveIndexValueBytes: cfg.LiveIndexValueBytes,
		DisableLiveIndex:    cfg.DisableLiveIndex,
		QuotaBytes:          cfg.QuotaBackendBytes,
		Now:                 cfg.Now,
	})
}

func withDefaults(cfg Config) Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Endpoint == "" {
		cfg.Endpoint = DefaultEndpoint
	}
	if cfg.Listener == "" {
		cfg.Listener = KineSocket
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = GracefulStopTimeout
	}
	if cfg.EmulatedETCDVersion == "" {
		cfg.EmulatedETCDVersion = server.Version
	}
	return cfg
}

// NewDialect is the database driver cfg.Endpoint names, with cfg's pool and
// TLS settings, not yet connected: for programs that write a database
// without serving it (quantykube import).
func NewDialect(cfg Config) (mvcc.Dialect, error) {
	cfg = withDefaults(cfg)
	if etcdURL(cfg.Endpoint) {
		return nil, fmt.Errorf("endpoint: %s is an etcd server, not a database", RedactEndpoint(cfg.Endpoint))
	}
	return dialect(cfg)
}

// dialect is the database driver the endpoint names.
func dialect(cfg Config) (mvcc.Dialect, error) {
	dsn := cfg.Endpoint
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return postgres.New(dsn, postgres.Options{
			Pool:             cfg.ConnectionPoolConfig,
			TLS:              cfg.BackendTLSConfig,
			StatementTimeout: cfg.DatastoreStatementTimeout,
			ListenEndpoint:   cfg.DatastoreListenEndpoint,
		})
	case strings.HasPrefix(dsn, "mysql://"):
		if cfg.DatastoreListenEndpoint != "" {
			return nil, fmt.Errorf("endpoint: --datastore-listen-endpoint is PostgreSQL's: MySQL has no LISTEN (the replicas poll)")
		}
		return mysql.New(dsn, mysql.Options{
			Pool:             cfg.ConnectionPoolConfig,
			TLS:              cfg.BackendTLSConfig,
			StatementTimeout: cfg.DatastoreStatementTimeout,
		})
	case strings.HasPrefix(dsn, "sqlite://"):
		return sqlite.New(dsn, sqlite.Options{Pool: cfg.ConnectionPoolConfig, PlainWAL: cfg.SQLitePlainWAL})
	case !strings.Contains(dsn, "://"):
		// A bare path is a SQLite file, as kine's default DSN is.
		return sqlite.New("sqlite://"+dsn, sqlite.Options{Pool: cfg.ConnectionPoolConfig, PlainWAL: cfg.SQLitePlainWAL})
	}
	scheme, _, _ := strings.Cut(dsn, "://")
	return nil, fmt.Errorf("endpoint: unknown scheme %q (want sqlite://path, a path, postgres://... or mysql://...)", scheme)
}

// Start opens the database and starts serving; it returns once the
// listener accepts connections. Close stops it.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg = withDefaults(cfg)
	if etcdURL(cfg.Endpoint) {
		return nil, fmt.Errorf("endpoint: %s is an etcd server, not a database QuantyKube can serve", RedactEndpoint(cfg.Endpoint))
	}
	tlsConf, err := cfg.ServerTLSConfig.ServerConfig()
	if err != nil {
		return nil, err
	}
	lis, url, err := listen(ctx, cfg.Listener, tlsConf != nil)
	if err != nil {
		return nil, err
	}
	store, err := OpenStore(ctx, cfg)
	if err != nil {
		lis.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, store: store, lis: lis, url: url, done: make(chan struct{}), serveErr: make(chan error, 1)}
	rpc := server.New(server.Config{
		Backend:                store,
		Logger:                 cfg.Logger,
		MaxRequestBytes:        cfg.MaxRequestBytes,
		ClientURLs:             []string{url},
		ProgressNotifyInterval: cfg.NotifyInterval,
		Version:                cfg.EmulatedETCDVersion,
		Done:                   s.done,
	})
	s.grpc = cfg.GRPCServer
	grpcLis := lis
	if s.grpc == nil {
		// The port also answers HTTP/1 (split.go), so TLS ends at the
		// listener, before the connection is handed to gRPC.
		opts := append(rpc.GRPCOptions(),
			// kube-apiserver pings every 30 s; etcd permits pings 5 s apart.
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
			grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
		)
		s.grpc = grpc.NewServer(opts...)
		split := newSplitListener(lis, tlsConf, cfg.Logger)
		grpcLis = split.grpc
		s.clientHTTP = &http.Server{Handler: s.clientHTTPHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
		go s.clientHTTP.Serve(split.http)
	}
	rpc.Register(s.grpc)
	hist := history.New(store)
	hist.Register(s.grpc)
	healthpb.RegisterHealthServer(s.grpc, health.NewServer())
	metrics.SetSource(store)
	if cfg.MetricsRegisterer != nil {
		if err := metrics.RegisterOn(cfg.MetricsRegisterer); err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if cfg.MetricsListenAddress != "" {
		ml, err := net.Listen("tcp", cfg.MetricsListenAddress)
		if err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		live, ready := s.healthChecks()
		registerHealth(mux, cfg.Logger, live, ready)
		s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go s.metrics.Serve(ml)
		cfg.Logger.Info("serving metrics and health", "listen", "http://"+ml.Addr().String(), "paths", "/metrics /livez /readyz /healthz /health")
	}
	if cfg.MetricsRegisterer != nil || cfg.MetricsListenAddress != "" {
		// A pass over the log's sizes now and then, only where metrics
		// are read (pkg/history's ReportTypes).
		go hist.ReportTypes(s.done)
	}
	if cfg.AggregatedAPI.Listen != "" {
		acfg := cfg.AggregatedAPI
		if acfg.Logger == nil {
			acfg.Logger = cfg.Logger
		}
		api, err := apiagg.New(acfg, hist)
		if err == nil {
			err = api.Serve()
		}
		if err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("aggregated API: %w", err)
		}
		s.api = api
	}
	go func() { s.serveErr <- s.grpc.Serve(grpcLis) }()
	cfg.Logger.Info("serving etcd v3 API", "listen", url, "endpoint", RedactEndpoint(cfg.Endpoint), "revision", store.Rev())
	return s, nil
}

// Store is the server's revision log.
func (s *Server) Store() *mvcc.Store { return s.store }

// ClientURL is what an etcd client dials: http://host:port, https://host:port
// with TLS, or unix:///path (unixs:// with TLS). A listener on every address
// (0.0.0.0, ::) is reached on 127.0.0.1.
func (s *Server) ClientURL() string { return s.url }

// ETCDConfig is what an etcd client needs to reach this server.
func (s *Server) ETCDConfig() ETCDConfig {
	return ETCDConfig{
		Endpoints:   []string{s.url},
		TLSConfig:   tls.Config{CAFile: s.cfg.ServerTLSConfig.CAFile},
		LeaderElect: s.store.Replicated(),
	}
}

// Wait returns when the gRPC server stops serving.
func (s *Server) Wait() error { return <-s.serveErr }

// Close stops accepting, ends watch streams, lets in-flight requests and
// their commits finish (for at most ShutdownTimeout), and closes the
// database.
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
		if s.api != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
			if err := s.api.Close(ctx); err != nil {
				s.cfg.Logger.Warn("aggregated API: stopping", "err", err)
			}
			cancel()
		}
		if s.metrics != nil {
			s.metrics.Close()
		}
		if s.clientHTTP != nil {
			s.clientHTTP.Close()
		}
		// The store finishes every request already queued before closing.
		s.closeErr = s.store.Close()
	})
	return s.closeErr
}

// closeListeners undoes a Start that failed after opening the store.
func (s *Server) closeListeners() {
	if s.metrics != nil {
		s.metrics.Close()
	}
	if s.clientHTTP != nil {
		s.clientHTTP.Close()
	}
	s.lis.Close()
	s.store.Close()
}

// RedactEndpoint hides the passwords in an endpoint URL, for logs and
// reports: the user's, and libpq's password and sslpassword parameters
// (the latter unlocks the client key), which pgx takes from the query too.
func RedactEndpoint(dsn string) string {
	if !strings.Contains(dsn, "://") || strings.HasPrefix(dsn, "sqlite://") {
		return dsn
	}
	if r, ok := redactMySQLDSN(dsn); ok {
		return r
	}
	u, err := neturl.Parse(dsn)
	if err != nil {
		return "(unparsable endpoint)"
	}
	params := strings.Split(u.RawQuery, "&")
	for i, p := range params {
		k, _, _ := strings.Cut(p, "=")
		if k, err := neturl.QueryUnescape(k); err == nil && (k == "password" || k == "sslpassword") {
			params[i] = k + "=xxxxx"
		}
	}
	u.RawQuery = strings.Join(params, "&")
	return u.Redacted()
}

// redactMySQLDSN hides the password of kine's MySQL form,
// mysql://user:password@tcp(host:port)/db, which is not a URL.
func redactMySQLDSN(dsn string) (string, bool) {
	rest, ok := strings.CutPrefix(dsn, "mysql://")
	if !ok {
		return "", false
	}
	at := -1
	for _, proto := range []string{"@tcp(", "@tcp6(", "@unix("} {
		at = max(at, strings.LastIndex(rest, proto))
	}
	if at < 0 {
		return "", false
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return dsn, true
	}
	return "mysql://" + user + ":xxxxx" + rest[at:], true
}
