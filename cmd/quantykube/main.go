// Command quantykube serves the etcd v3 API from an SQL revision log.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
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

// A command is one of quantykube's subcommands: it parses its flags from
// args, prints its results to stdout and its progress to stderr, and stops
// cleanly when ctx ends (SIGINT or SIGTERM): an interrupted import or
// restore leaves its target as it was, serve finishes in-flight requests.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var commands = map[string]command{
	"serve":      serveMain,
	"history":    historyMain,
	"import":     importMain,
	"backup":     backupMain,
	"restore":    restoreMain,
	"apiservice": apiserviceMain,
	"version":    versionMain,
	"--version":  versionMain,
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "help" || name == "-h" || name == "--help" {
		fmt.Print(usage)
		return
	}
	run, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "quantykube: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[2:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "quantykube: %v\n", err)
		os.Exit(1)
	}
}

// newFlagSet is a command's flag set: flags in the order they were
// defined, usage on stderr.
func newFlagSet(usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(usage, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: %s\n\nFlags:\n%s", usage, fs.FlagUsages())
	}
	return fs
}
