// Command quantykube serves the etcd v3 API from an SQL revision log.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/server"
)

// DefaultRetain keeps a day of history: enough to see what an object
// looked like before last night's change, or to undo yesterday's delete.
const DefaultRetain = 24 * time.Hour

// DefaultRetainPrefixes keep heartbeats briefly: a Lease renewed every few
// seconds would otherwise outweigh the history of every real object.
var DefaultRetainPrefixes = []string{"/registry/leases/=10m", "/registry/masterleases/=10m"}

const usage = `quantykube: the etcd v3 API on an SQL revision log

Usage:
  quantykube serve [flags]     serve the etcd v3 gRPC API
  quantykube history COMMAND   read and restore retained history (log, get, restore)
  quantykube version           print the version

Run 'quantykube serve --help' for the flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "history":
		err = history(os.Args[2:])
	case "version", "--version":
		fmt.Printf("quantykube (etcd API %s)\n", server.Version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "quantykube: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "quantykube: %v\n", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	var cfg endpoint.Config
	var debug bool
	fs.StringVar(&cfg.ListenAddress, "listen-address", endpoint.DefaultListenAddress, "address to serve the etcd API on: host:port or unix:///path")
	fs.StringVar(&cfg.Endpoint, "endpoint", endpoint.DefaultEndpoint, "database: sqlite://path or postgres://user:pass@host:port/db?sslmode=...")
	fs.IntVar(&cfg.DatastoreMaxOpenConns, "datastore-max-open-connections", 0, "postgres: most connections of the read pool (default max(8, 4*GOMAXPROCS); the writer and the listener take one more each)")
	fs.DurationVar(&cfg.DatastoreStatementTimeout, "datastore-statement-timeout", 60*time.Second, "postgres: statement_timeout of every session (0: the server's setting)")
	fs.StringVar(&cfg.CertFile, "cert-file", "", "serving TLS certificate")
	fs.StringVar(&cfg.KeyFile, "key-file", "", "serving TLS key")
	fs.StringVar(&cfg.TrustedCAFile, "trusted-ca-file", "", "CA that signs client certificates")
	fs.BoolVar(&cfg.ClientCertAuth, "client-cert-auth", false, "require a client certificate signed by --trusted-ca-file")
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes, "largest request accepted, in bytes")
	fs.DurationVar(&cfg.WatchProgressNotifyInterval, "watch-progress-notify-interval", 0, "how often progress_notify watchers hear the revision (default 10m)")
	fs.DurationVar(&cfg.Retain, "retain", DefaultRetain, "keep history this long; 0 keeps everything, else at least 75s")
	retainPrefix := fs.StringArray("retain-prefix", DefaultRetainPrefixes, "PREFIX=DURATION: keep history under PREFIX this long instead (repeatable; replaces the defaults)")
	fs.DurationVar(&cfg.PruneInterval, "prune-interval", 30*time.Second, "how often retention removes history past its window")
	fs.Int64Var(&cfg.CacheBytes, "cache-bytes", mvcc.DefaultCacheBytes, "sqlite: memory for an in-memory copy of the live keys, which answers reads at the latest revision; when the live keys outgrow it, reads go to the database (0: off)")
	fs.StringVar(&cfg.MetricsListenAddress, "metrics-listen-address", "", "serve Prometheus metrics at http://ADDRESS/metrics (e.g. 127.0.0.1:8080); off when empty")
	pprofAddr := fs.String("pprof-address", "", "serve Go's net/http/pprof at http://ADDRESS/debug/pprof/ (loopback addresses only, e.g. 127.0.0.1:6060); off when empty")
	fs.BoolVar(&debug, "debug", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case cfg.CacheBytes < 0:
		return fmt.Errorf("--cache-bytes %d: want 0 (off) or a size in bytes", cfg.CacheBytes)
	case cfg.CacheBytes == 0:
		cfg.CacheBytes = -1 // the store's zero value is its default
	}
	for _, rp := range *retainPrefix {
		prefix, dur, ok := strings.Cut(rp, "=")
		d, err := time.ParseDuration(dur)
		if !ok || prefix == "" || err != nil {
			return fmt.Errorf("--retain-prefix %q: want PREFIX=DURATION, e.g. /registry/leases/=10m", rp)
		}
		cfg.RetainPrefixes = append(cfg.RetainPrefixes, mvcc.RetentionRule{Prefix: []byte(prefix), Retain: d})
	}
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *pprofAddr != "" {
		closePprof, err := servePprof(*pprofAddr, cfg.Logger)
		if err != nil {
			return err
		}
		defer closePprof()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := endpoint.Start(ctx, cfg)
	if err != nil {
		return err
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
