// Command quantykube serves the etcd v3 API from an SQL revision log.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
)

// A Command is one of quantykube's subcommands.
//
// Run parses the command's flags from args (the arguments after its name),
// prints its results to stdout and its progress and logs to stderr, and
// stops cleanly when ctx ends (SIGINT or SIGTERM): an interrupted import or
// restore leaves its target as it was, serve finishes in-flight requests.
// --help prints the usage and returns nil. A failure is returned, not
// printed: quantykube prints it after "quantykube: " and exits 1.
//
// Usage is the command's help: its synopsis ("quantykube NAME ...") on the
// first line, then what it does; the flag set appends the flags.
type Command interface {
	Run(ctx context.Context, args []string, stdout, stderr io.Writer) error
	Usage() string
}

// commands are quantykube's subcommands, in the order the usage lists
// them. args is the synopsis after the name; summary is one line.
var commands = []struct {
	name, args, summary string
	cmd                 Command
}{
	{"serve", "[flags]", "serve the etcd v3 gRPC API", ServeCommand{}},
	{"history", "COMMAND", "read and restore retained history (log, get, restore, top)", HistoryCommand{}},
	{"import", "--from SOURCE", "fill an empty store from kine or etcd, keeping revisions", ImportCommand{}},
	{"migrate", "--from ENDPOINT --to ENDPOINT", "copy a store to another database, history included", MigrateCommand{}},
	{"backup", "FILE", "copy a live SQLite store, history included", BackupCommand{}},
	{"restore", "FILE | --from URL", "put a backup back, or restore from object storage", RestoreCommand{}},
	{"replica", "ls URL", "list a store's replica in object storage", ReplicaCommand{}},
	{"status", "", "print what a running server holds in memory", StatusCommand{}},
	{"check", "COMMAND", "check a store or a server (hash, perf)", CheckCommand{}},
	{"export", "--etcd-snapshot FILE", "write the live state as an etcd v3.6 snapshot, keeping revisions", ExportCommand{}},
	{"apiservice", "", "print what registers the aggregated API with kube-apiserver", APIServiceCommand{}},
	{"version", "", "print the version and commit", VersionCommand{}},
}

// usage is quantykube's help, one line per entry of commands.
func usage() string {
	var b strings.Builder
	b.WriteString("quantykube: the etcd v3 API on an SQL revision log\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-37s %s\n", strings.TrimSpace("quantykube "+c.name+" "+c.args), c.summary)
	}
	b.WriteString("\nRun 'quantykube COMMAND --help' for a command's flags.\n")
	return b.String()
}

// lookup is the command named name; --version names version.
func lookup(name string) (Command, bool) {
	if name == "--version" {
		name = "version"
	}
	for _, c := range commands {
		if c.name == name {
			return c.cmd, true
		}
	}
	return nil, false
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command args name and returns the exit status: 0, 1 when
// the command fails, 2 when no command or an unknown one is named.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" {
		fmt.Fprint(stdout, usage())
		return 0
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "quantykube: unknown command %q\n\n%s", name, usage())
		return 2
	}
	if err := cmd.Run(ctx, args[1:], stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "quantykube: %v\n", err)
		return 1
	}
	return 0
}

// newFlagSet is c's flag set: named by the first line of c's usage, flags
// in the order they are defined, help (c's usage, then the flags) and
// pflag's warnings on w.
func newFlagSet(c Command, w io.Writer) *pflag.FlagSet {
	usage := c.Usage()
	name, _, _ := strings.Cut(usage, "\n")
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\nFlags:\n%s", usage, fs.FlagUsages())
	}
	return fs
}

// flagError is the error a command returns when parsing its flags
// failed with err: nil after --help, which printed the usage and ends the
// command.
func flagError(err error) error {
	if errors.Is(err, pflag.ErrHelp) {
		return nil
	}
	return err
}
