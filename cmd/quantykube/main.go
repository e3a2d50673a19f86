// Command quantykube serves the etcd v3 API from an SQL revision log.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `quantykube: the etcd v3 API on an SQL revision log

Usage:
  quantykube serve [flags]              serve the etcd v3 gRPC API
  quantykube history COMMAND            read and restore retained history (log, get, restore)
  quantykube import --from SOURCE       fill an empty store from kine or etcd, keeping revisions
  quantykube backup FILE                copy a live SQLite store, history included
  quantykube restore FILE               put a backup back
  quantykube apiservice                 print what registers the aggregated API with kube-apiserver
  quantykube version                    print the version and commit

Run 'quantykube COMMAND --help' for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "serve":
		err = serve(args)
	case "history":
		err = history(args)
	case "import":
		err = withSignals(func(ctx context.Context) error { return importMain(ctx, args, os.Stdout, os.Stderr) })
	case "backup":
		err = withSignals(func(ctx context.Context) error { return backupMain(ctx, args, os.Stdout) })
	case "restore":
		err = withSignals(func(ctx context.Context) error { return restoreMain(ctx, args, os.Stdout) })
	case "apiservice":
		err = apiservice(args, os.Stdout, os.Stderr)
	case "version", "--version":
		err = versionMain(args, os.Stdout)
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

// withSignals runs f with a context that SIGINT and SIGTERM cancel: an
// interrupted import or restore stops cleanly, leaving its target as it
// was.
func withSignals(f func(ctx context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return f(ctx)
}
