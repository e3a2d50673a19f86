package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/replicate"
	"github.com/quantyroot/quantykube/pkg/server"
)

// DefaultRetain keeps a day of history: enough to see what an object
// looked like before last night's change, or to undo yesterday's delete.
const DefaultRetain = 24 * time.Hour

// DefaultRetainBytes bounds history by size too: past 2 GiB of it the
// oldest goes, even inside --retain, so a busy store's disk has a bound;
// the live state is never counted nor refused (docs/adr/030). etcd's
// default quota is the same size, but counts the live state and makes
// the cluster read-only once reached.
const DefaultRetainBytes = "2Gi"

// DefaultRetainPrefixes keep heartbeats briefly: a Lease renewed every few
// seconds would otherwise outweigh the history of every real object.
var DefaultRetainPrefixes = []string{"/registry/leases/=10m", "/registry/masterleases/=10m"}

// DefaultListenAddress is etcd's client port, on loopback.
const DefaultListenAddress = "127.0.0.1:2379"

// serveFlags binds `quantykube serve`'s flags to cfg. The deprecated
// --cache-bytes is resolved by parse.
type serveFlags struct {
	fs           *pflag.FlagSet
	cfg          endpoint.Config
	retainPrefix []string
	retainBytes  string
	valueBytes   string
	quotaBytes   string
	liveIndex    bool
	cacheBytes   int64
	pprofAddr    string
	debug        bool
	log          logFlags
	replicate    replicateFlags
	stderr       io.Writer // where the log goes
}

// ServeCommand is `quantykube serve`.
type ServeCommand struct{}

// Usage is serve's help.
func (ServeCommand) Usage() string {
	return `quantykube serve [flags]

Serves the etcd v3 gRPC API (and quantykube.History) from a database.`
}

// newServeFlags is serve's flag set; help, warnings and the log go to
// stderr.
func newServeFlags(stderr io.Writer) *serveFlags {
	f := &serveFlags{fs: newFlagSet(ServeCommand{}, stderr), stderr: stderr}
	fs, cfg := f.fs, &f.cfg
	fs.StringVar(&cfg.Listener, "listen-address", DefaultListenAddress, "where to serve the etcd API: host:port, tcp://host:port or unix:///path, as kine names them (the socket is made 0600)")
	registerDatastoreFlags(fs, cfg, "the database to serve")
	fs.IntVar(&cfg.ConnectionPoolConfig.MaxOpen, "datastore-max-open-connections", 0, "size of the read pool (0: max(8, 4*GOMAXPROCS) on PostgreSQL and MySQL, max(4, 2*GOMAXPROCS) on SQLite); besides it the writer holds one connection, each server on PostgreSQL and MySQL one for its row in meta, and on PostgreSQL one for LISTEN")
	fs.DurationVar(&cfg.DatastoreStatementTimeout, "datastore-statement-timeout", 60*time.Second, "PostgreSQL: statement_timeout of every statement; MariaDB: max_statement_time; MySQL: max_execution_time, which bounds reads only (0: the server's setting)")
	fs.StringVar(&cfg.DatastoreListenEndpoint, "datastore-listen-endpoint", "", "PostgreSQL: a direct connection (postgres://...) for LISTEN, where --endpoint is a pooler that cannot deliver notifications (default: --endpoint's; without notifications the other replicas' commits are polled every second; docs/postgresql.md)")
	fs.BoolVar(&cfg.SQLitePlainWAL, "sqlite-plain-wal", false, "SQLite: write the WAL as SQLite writes it, not gathered into few large writes (ADR-018: gathering takes 15-21% off the server's CPU per create at one to eight clients); the way back should a modernc.org/sqlite or libc upgrade break the gathering")
	fs.StringVar(&cfg.ServerTLSConfig.CertFile, "cert-file", "", "serving TLS certificate, as etcd names it (default: none, plaintext)")
	fs.StringVar(&cfg.ServerTLSConfig.KeyFile, "key-file", "", "serving TLS key, with --cert-file (default: none)")
	fs.StringVar(&cfg.ServerTLSConfig.TrustedCAFile, "trusted-ca-file", "", "require client certificates signed by this CA, as etcd does (default: none, no client certificate asked)")
	fs.Bool("client-cert-auth", false, "require client certificates, as etcd's flag; needs --trusted-ca-file, which implies it")
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes, "largest request accepted, in bytes (1.5 MiB, as etcd's)")
	fs.DurationVar(&cfg.NotifyInterval, "watch-progress-notify-interval", 0, "how often progress_notify watchers hear the revision (0: 10m, as etcd's)")
	fs.DurationVar(&cfg.Retain, "retain", DefaultRetain, "keep history this long (0 keeps everything; else at least 75s)")
	fs.StringVar(&f.retainBytes, "retain-bytes", DefaultRetainBytes, "keep at most this much history (the changes kept and the states they replaced), the oldest pruned first even inside --retain; the live state is never counted nor refused; 0: no limit (docs/adr/030)")
	fs.StringArrayVar(&f.retainPrefix, "retain-prefix", DefaultRetainPrefixes, "PREFIX=DURATION[,SIZE]: keep history under PREFIX this long instead of --retain, and at most SIZE of it (default: a budget of --retain-bytes of its own); repeatable; replaces the defaults")
	fs.StringVar(&f.quotaBytes, "quota-backend-bytes", "0", "as etcd's: past this database size (Status's dbSize, measured every second), puts, Txns with a put and lease grants fail with etcd's mvcc: database space exceeded and raise a NOSPACE alarm, kept in the database until etcdctl alarm disarm; reads, deletes, Compact and Defragment still work; 0 or negative: no quota, unlike etcd's 2 GiB default (docs/adr/049)")
	fs.DurationVar(&cfg.PruneInterval, "prune-interval", 30*time.Second, "how often retention removes history past its window (a byte budget is checked every second)")
	fs.BoolVar(&f.liveIndex, "live-index", true, "answer reads at the latest revision from an in-memory index of the live keys (docs/adr/008); on PostgreSQL and MySQL each server keeps one, and a read first asks the database its revision, one query shared by concurrent reads (docs/adr/016)")
	fs.Int64Var(&cfg.LiveIndexBytes, "live-index-bytes", mvcc.DefaultLiveIndexBytes, "memory for the live index: every live key's row and the values --live-index-value-bytes allows (0: the default, 256 MiB); when the rows outgrow it, reads go to the database. --cache-bytes N is its deprecated old name (0 turns the index off)")
	fs.StringVar(&f.valueBytes, "live-index-value-bytes", "6Mi", "of --live-index-bytes, at most this much for values: the live index holds every live key's row (about 130 bytes and the key's length each) and the values that fit, the most recently read first; the others are read from the database when asked for (docs/adr/041)")
	fs.Int64Var(&f.cacheBytes, "cache-bytes", 0, "the live index's budget; 0 turns it off")
	_ = fs.MarkDeprecated("cache-bytes", "use --live-index-bytes, and --live-index=false for 0")
	fs.StringVar(&cfg.MetricsListenAddress, "metrics-listen-address", "", "serve Prometheus metrics at http://ADDRESS/metrics (write batches and their failures, revision, floors, pruned rows, history's size and window and its bytes by type, watchers, leases, the live index's bytes) and the health endpoints /livez, /readyz, /healthz and /health (e.g. 127.0.0.1:2381); off when empty")
	api := &cfg.AggregatedAPI
	fs.StringVar(&api.Listen, "api-listen", "", "also serve History as the aggregated Kubernetes API quanty.quantyroot.io/v1alpha1 on host:port (docs/AGGREGATED-API.md); off when empty")
	fs.StringVar(&api.CertFile, "api-cert", "", "aggregated API: serving certificate, for <service>.<namespace>.svc (default: none; required with --api-listen)")
	fs.StringVar(&api.KeyFile, "api-key", "", "aggregated API: serving key (default: none; required with --api-listen)")
	fs.StringVar(&api.ClientCAFile, "api-client-ca", "", "aggregated API: kube-apiserver's front-proxy CA (its --requestheader-client-ca-file); only clients it signed may call (default: none; required with --api-listen)")
	fs.StringSliceVar(&api.AllowedNames, "api-allowed-names", []string{apiagg.DefaultAllowedName}, "aggregated API: front-proxy certificate names accepted (kube-apiserver's --requestheader-allowed-names); empty accepts any name the CA signed")
	fs.StringSliceVar(&api.RawAccessGroups, "api-raw-access-groups", []string{apiagg.DefaultRawAccessGroup}, "aggregated API: groups that may read and restore keys holding no Kubernetes object")
	fs.StringVar(&api.Kubeconfig, "api-kubeconfig", "", "aggregated API: kubeconfig for the SubjectAccessReviews that check each caller's access to the object (default: the pod's service account)")
	fs.BoolVar(&api.InsecureSkipObjectAuthorization, "api-insecure-skip-object-authorization", false, "aggregated API: do not check each caller's access to the object; anyone kube-apiserver lets through reads every object's history, Secrets included")
	fs.StringVar(&api.RestoreCheck, "api-restore-check", apiagg.RestoreCheckDryRun, "aggregated API: before a restore writes, ask kube-apiserver as the caller for a dry run of the change (dry-run; the store impersonates callers), or not (none: then RBAC objects, admission configuration, APIServices, CRDs, certificates, Namespaces and Nodes are restored only by --api-raw-access-groups)")
	fs.StringVar(&api.EtcdPrefix, "api-etcd-prefix", "/registry", "aggregated API: kube-apiserver's --etcd-prefix, where its objects' keys begin")
	fs.StringVar(&f.pprofAddr, "pprof-address", "", "serve Go's net/http/pprof at http://ADDRESS/debug/pprof/ (loopback addresses only, e.g. 127.0.0.1:6060); off when empty")
	f.replicate.register(fs)
	f.log.register(fs)
	fs.BoolVar(&f.debug, "debug", false, "log at debug level")
	_ = fs.MarkDeprecated("debug", "use --log-level=debug")
	fs.Lookup("log-level").Usage += " (--debug is the deprecated form of debug)"
	return f
}

// registerDatastoreFlags binds --endpoint and the database's TLS files, as
// every command that opens a QuantyKube database names them.
func registerDatastoreFlags(fs *pflag.FlagSet, cfg *endpoint.Config, what string) {
	fs.StringVar(&cfg.Endpoint, "endpoint", endpoint.DefaultEndpoint, what+": sqlite://path (or a bare path), postgres://user:password@host:5432/db?sslmode=verify-full&sslrootcert=/path/ca.pem (also postgresql://; every libpq-style parameter goes through to pgx), or mysql://user:password@tcp(host:3306)/db (kine's form; also mysql://user:password@host:3306/db; go-sql-driver/mysql's parameters, docs/mysql.md)")
	fs.StringVar(&cfg.BackendTLSConfig.CAFile, "datastore-cafile", "", "PostgreSQL, MySQL: the CA that verifies the database server, unless the endpoint names one (PostgreSQL: sslrootcert, and sslmode=verify-full unless it sets sslmode; MySQL: tls=) (default: none, as the endpoint says)")
	fs.StringVar(&cfg.BackendTLSConfig.CertFile, "datastore-certfile", "", "PostgreSQL, MySQL: the client certificate for the database, unless the endpoint names one (PostgreSQL: sslcert; MySQL: tls=) (default: none)")
	fs.StringVar(&cfg.BackendTLSConfig.KeyFile, "datastore-keyfile", "", "PostgreSQL, MySQL: the client key for the database, unless the endpoint names one (PostgreSQL: sslkey; MySQL: tls=) (default: none)")
}

// parse parses args and checks what the flags cannot check alone.
func (f *serveFlags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("serve takes no arguments, got %q", f.fs.Args())
	}
	if err := f.replicate.check(); err != nil {
		return err
	}
	cfg := &f.cfg
	if auth, _ := f.fs.GetBool("client-cert-auth"); auth && cfg.ServerTLSConfig.TrustedCAFile == "" {
		return errors.New("--client-cert-auth needs --trusted-ca-file")
	}
	if f.fs.Changed("cache-bytes") {
		switch {
		case f.fs.Changed("live-index-bytes") || f.fs.Changed("live-index"):
			return errors.New("--cache-bytes is the old name of --live-index-bytes: give one of them")
		case f.cacheBytes < 0:
			return fmt.Errorf("--cache-bytes %d: want 0 (off) or a size in bytes", f.cacheBytes)
		case f.cacheBytes == 0:
			f.liveIndex = false
		default:
			cfg.LiveIndexBytes = f.cacheBytes
		}
	}
	if cfg.LiveIndexBytes < 0 {
		return fmt.Errorf("--live-index-bytes %d: want a size in bytes (0: the default)", cfg.LiveIndexBytes)
	}
	cfg.DisableLiveIndex = !f.liveIndex
	var err error
	if cfg.LiveIndexValueBytes, err = mvcc.ParseSize(f.valueBytes); err != nil {
		return fmt.Errorf("--live-index-value-bytes: %w", err)
	}
	if cfg.LiveIndexValueBytes == 0 {
		return errors.New("--live-index-value-bytes 0: want a size (the live index holds no value for less than a byte; --live-index=false turns it off)")
	}
	if cfg.QuotaBackendBytes, err = parseQuota(f.quotaBytes); err != nil {
		return fmt.Errorf("--quota-backend-bytes: %w", err)
	}
	if cfg.RetainBytes, err = mvcc.ParseSize(f.retainBytes); err != nil {
		return fmt.Errorf("--retain-bytes: %w", err)
	}
	for _, rp := range f.retainPrefix {
		prefix, rule, ok := strings.Cut(rp, "=")
		dur, size, sized := strings.Cut(rule, ",")
		d, err := time.ParseDuration(dur)
		if !ok || prefix == "" || err != nil {
			return fmt.Errorf("--retain-prefix %q: want PREFIX=DURATION[,SIZE], e.g. /registry/leases/=10m or /registry/events/=1h,256Mi", rp)
		}
		r := mvcc.RetentionRule{Prefix: []byte(prefix), Retain: d}
		if sized {
			if r.MaxBytes, err = mvcc.ParseSize(size); err != nil {
				return fmt.Errorf("--retain-prefix %q: %w", rp, err)
			}
			if cfg.RetainBytes > 0 && r.MaxBytes > cfg.RetainBytes {
				return fmt.Errorf("--retain-prefix %q keeps up to %s, more than --retain-bytes %s for every key: give the prefix less, or raise --retain-bytes", rp, size, f.retainBytes)
			}
		}
		cfg.RetainPrefixes = append(cfg.RetainPrefixes, r)
	}
	if f.debug {
		if f.fs.Changed("log-level") {
			return errors.New("--debug is the old form of --log-level=debug: give one of them")
		}
		f.log.level = "debug"
	}
	cfg.Logger, err = f.log.logger(f.stderr)
	return err
}

// Run serves until ctx ends or the server fails.
func (ServeCommand) Run(ctx context.Context, args []string, _, stderr io.Writer) error {
	f := newServeFlags(stderr)
	if err := f.parse(args); err != nil {
		return flagError(err)
	}
	cfg := f.cfg
	if f.pprofAddr != "" {
		closePprof, err := servePprof(f.pprofAddr, cfg.Logger)
		if err != nil {
			return err
		}
		defer closePprof()
	}
	b := currentBuild()
	cfg.Logger.Info("starting quantykube", "version", b.Version, "commit", b.Commit, "modified", b.Modified)
	setMemoryLimit(cfg.Logger)
	var rep atomic.Pointer[replicate.Replicator]
	if f.replicate.url != "" {
		if _, err := sqliteDialect("serve --replicate", cfg); err != nil {
			return err
		}
		cfg.HealthWarnings = append(cfg.HealthWarnings, f.replicate.healthWarning(&rep))
		cfg.RetentionHold = f.replicate.retentionHold(&rep)
	}
	srv, err := endpoint.Start(ctx, cfg)
	if err != nil {
		return err
	}
	if f.replicate.url != "" {
		r, err := f.replicate.start(ctx, cfg, cfg.Logger)
		if err != nil {
			srv.Close()
			return err
		}
		rep.Store(r)
		// After the server: its last writes go in the last segment.
		defer r.Close()
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- srv.Wait() }()
	select {
	case <-ctx.Done():
		cfg.Logger.Info("shutting down: finishing in-flight requests")
		return srv.Close()
	case err := <-waitErr:
		srv.Close()
		return err
	}
}

// servePprof serves the profiling handlers on their own mux, never on the
// metrics or etcd listeners. Profiles expose memory contents and cost CPU,
// so only a loopback address is accepted.
func servePprof(addr string, log *slog.Logger) (func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof-address %q: must be a loopback address", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	log.Info("serving pprof", "listen", "http://"+l.Addr().String()+"/debug/pprof/")
	return func() { hs.Close() }, nil
}

// parseQuota is a size; a negative number turns the quota off, as etcd's.
func parseQuota(v string) (int64, error) {
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n < 0 {
		return 0, nil
	}
	return mvcc.ParseSize(v)
}
