package main

// `quantykube check`: checks of a store or a server, each a subcommand
// of its own, listed once in checkCommands.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// CheckCommand is `quantykube check`: it runs one of checkCommands.
type CheckCommand struct{}

// checkCommands are check's subcommands, in the order its usage lists
// them: adding one is one line here.
var checkCommands = []struct {
	name, summary string
	cmd           Command
}{
	{"hash", "a hash of the state at a revision, the same on every database: compare replicas, backups, imports", CheckHashCommand{}},
	{"perf", "etcdctl's check perf: PASS or FAIL for a small, medium, large or xLarge cluster's write load", CheckPerfCommand{}},
}

// Usage is check's help, which lists its subcommands.
func (CheckCommand) Usage() string {
	var b strings.Builder
	b.WriteString("quantykube check: checks of a store or a server\n\nUsage:\n")
	for _, sub := range checkCommands {
		synopsis, _, _ := strings.Cut(sub.cmd.Usage(), "\n")
		fmt.Fprintf(&b, "  %s\n      %s\n", synopsis, sub.summary)
	}
	b.WriteString("\nRun 'quantykube check COMMAND --help' for the flags.\n")
	return b.String()
}

// Run runs the subcommand args[0] names; help, -h and --help print the
// usage to stdout.
func (c CheckCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := make([]string, len(checkCommands))
	for i, sub := range checkCommands {
		names[i] = sub.name
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, c.Usage())
		return fmt.Errorf("check: missing command (%s)", strings.Join(names, ", "))
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, c.Usage())
		return nil
	}
	for _, sub := range checkCommands {
		if sub.name == args[0] {
			return sub.cmd.Run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprint(stderr, c.Usage())
	return fmt.Errorf("check: unknown command %q (want %s)", args[0], strings.Join(names, ", "))
}

// errNoEndpoint is a check of a store run without --endpoint.
var errNoEndpoint = errors.New("--endpoint is required: the database of the store to check")
