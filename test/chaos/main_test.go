//go:build chaos

package chaos

import (
	"context"
	"database/sql/driver"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/replicate"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
	"github.com/quantyroot/quantykube/test/framework"
)

// weakSyncEnv makes this test binary, started with it set, serve as a
// QuantyKube whose SQLite commits with synchronous=NORMAL: in WAL mode, a
// commit is not synced, so a power cut loses acknowledged writes. It is
// the power-cut tests' negative control (with --replicate, the replication
// drill's: replicateWeak). Only the test binary reads it:
// quantykube itself has no way to weaken its durability.
const weakSyncEnv = "QUANTY_CHAOS_WEAK_SYNC_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(weakSyncEnv) == "1" {
		os.Exit(serveWeak(os.Args[1:]))
	}
	framework.Main(m)
}

// serveWeak is `quantykube serve` for the flags the framework passes,
// with every SQLite connection switched to synchronous=NORMAL once opened.
func serveWeak(args []string) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintf(os.Stderr, "weak server: want serve and its flags, got %q\n", args)
		return 2
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen-address", "", "")
	ep := fs.String("endpoint", "", "")
	progress := fs.Duration("watch-progress-notify-interval", 0, "")
	repURL := fs.String("replicate", "", "")
	repInterval := fs.Duration("replicate-interval", 0, "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	msqlite.RegisterConnectionHook(func(conn msqlite.ExecQuerierContext, _ string) error {
		_, err := conn.ExecContext(context.Background(), "PRAGMA synchronous=NORMAL", []driver.NamedValue{})
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := endpoint.Start(ctx, endpoint.Config{Listener: *listen, Endpoint: *ep, NotifyInterval: *progress})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "weak server: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "weak server (synchronous=NORMAL) serving %s\n", srv.ClientURL())
	if *repURL != "" {
		rep, err := replicateWeak(*ep, *repURL, *repInterval)
		if err != nil {
			fmt.Fprintf(os.Stderr, "weak server: %v\n", err)
			srv.Close()
			return 1
		}
		defer rep.Close()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	if err := srv.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "weak server: %v\n", err)
		return 1
	}
	return 0
}

// replicateWeak ships the weak server's store as `serve --replicate`
// does: the replication drill's negative control, where a commit is
// visible to the replicator before it is durable.
func replicateWeak(ep, url string, interval time.Duration) (*replicate.Replicator, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	md, err := endpoint.NewDialect(endpoint.Config{Endpoint: ep})
	if err != nil {
		return nil, err
	}
	d, ok := md.(*sqlite.Dialect)
	if !ok {
		return nil, fmt.Errorf("--replicate: %s is not a SQLite store", ep)
	}
	st, err := objstore.Open(ctx, url, objstore.Options{})
	if err != nil {
		return nil, err
	}
	return replicate.Start(ctx, replicate.Config{Dialect: d, Store: st, Interval: interval})
}
