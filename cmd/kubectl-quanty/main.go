// Command kubectl-quanty is the kubectl plugin for QuantyKube's history:
// `kubectl quanty log|get|diff|restore|deleted|undelete|changes|blame|revert`.
// It reaches the aggregated API quanty.quantyroot.io/v1alpha1 (pkg/apiagg)
// only through kubectl, so it needs nothing but what kubectl already uses.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// command is one entry of the command table.
type command struct {
	name     string
	usage    string // the arguments, after "kubectl quanty NAME"
	short    string // one line for the overview
	long     string
	examples string
	// setup registers the command's flags and returns what runs it.
	setup func(fs *pflag.FlagSet) func(ctx context.Context, s *session, args []string) error
	// errStatus is the exit status of any error, a wrong flag included,
	// when it is not 1: diff's is 2, as kubectl diff's, since its 1 says
	// that the objects differ.
	errStatus int
}

// failed is the exit status of an error of the command.
func (c *command) failed() int {
	if c.errStatus != 0 {
		return c.errStatus
	}
	return 1
}

// version is set by make dist (-ldflags -X main.version=...).
var version = "dev"

var commands = []*command{logCmd, getCmd, diffCmd, restoreCmd, deletedCmd, undeleteCmd, blameCmd, revertCmd, changesCmd}

// exitError carries an exit status other than 1, and a message or none.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

// plugin is one run: what it reads and writes, and the clock.
type plugin struct {
	in             io.Reader
	out, errOut    io.Writer
	now            func() time.Time
	outIsTerminal  bool
	externalDiff   string // KUBECTL_EXTERNAL_DIFF
	loc            *time.Location
	kubectlOptions *kubectlFlags
	etcdPrefix     string
}

func main() {
	p := &plugin{
		in: os.Stdin, out: os.Stdout, errOut: os.Stderr, now: time.Now, loc: time.Local,
		outIsTerminal: term.IsTerminal(int(os.Stdout.Fd())) && os.Getenv("NO_COLOR") == "",
		externalDiff:  os.Getenv("KUBECTL_EXTERNAL_DIFF"),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := p.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// run runs one command line and returns the exit status.
func (p *plugin) run(ctx context.Context, args []string) int {
	// Everything printed goes through the output layer (screen.go).
	p.out, p.errOut = newScreen(p.out), newScreen(p.errOut)
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 && args[0] == "help" {
			return p.run(ctx, []string{args[1], "--help"})
		}
		fmt.Fprint(p.out, overview())
		if len(args) == 0 {
			return 1
		}
		return 0
	}
	if args[0] == "version" || args[0] == "--version" {
		fmt.Fprintf(p.out, "kubectl-quanty %s\n", version)
		return 0
	}
	var cmd *command
	for _, c := range commands {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(p.errOut, "error: unknown command %q for \"kubectl quanty\"\nRun 'kubectl quanty --help' for usage.\n", args[0])
		return 1
	}
	// The command's own flags, then kubectl's: one command line, two
	// sections of help.
	own := pflag.NewFlagSet("kubectl quanty "+cmd.name, pflag.ContinueOnError)
	own.SortFlags = false
	runFn := cmd.setup(own)
	own.StringVar(&p.etcdPrefix, "etcd-prefix", storagekey.DefaultPrefix, "kube-apiserver's --etcd-prefix, under which it stores objects")
	p.kubectlOptions = newKubectlFlags()
	fs := pflag.NewFlagSet("kubectl quanty "+cmd.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.AddFlagSet(own)
	p.kubectlOptions.register(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(p.out, cmd.help(own, p.kubectlOptions.fs))
			return 0
		}
		fmt.Fprintf(p.errOut, "error: %v\nSee 'kubectl quanty %s --help' for usage.\n", err, cmd.name)
		return cmd.failed()
	}
	k, err := newKubectl(p.kubectlOptions)
	if err == nil {
		s := &session{plugin: p, k: k, api: &historyAPI{k: k}, disc: newDiscovery(k)}
		err = runFn(ctx, s, fs.Args())
	}
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(p.errOut, "error: %v\n", ee.err)
		}
		return ee.code
	default:
		fmt.Fprintf(p.errOut, "error: %v\n", err)
		return cmd.failed()
	}
}

const overviewText = `kubectl quanty: the history of Kubernetes objects kept by QuantyKube, and undo.

Every command goes through kubectl (kubectl get --raw, kubectl create --raw)
to the aggregated API quanty.quantyroot.io/v1alpha1, with each of kubectl's
global flags that is given passed on (--kubeconfig, --context,
-n/--namespace, --as, --server, --token, ...: kubectl options lists them).
TYPE is what kubectl takes: a resource, its singular, kind or short name,
optionally with .GROUP (deploy, deployments.apps, Widget.example.com).
TIME is RFC 3339 (2026-05-01T12:00:00Z), a local date-time
(2026-05-01 14:00), "now", or relative to now: -15m, -2h, -1d.

Commands:
`

func overview() string {
	var b strings.Builder
	b.WriteString(overviewText)
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.short)
	}
	b.WriteString("\nExamples:\n")
	for _, c := range commands {
		b.WriteString(firstExample(c.examples))
	}
	b.WriteString("\nRun 'kubectl quanty COMMAND --help' for a command's flags and more examples,\n'kubectl quanty version' for the version.\n")
	return b.String()
}

// firstExample is the first example of a command: its comment and its
// command line.
func firstExample(examples string) string {
	lines := strings.SplitAfter(strings.TrimLeft(examples, "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "kubectl ") {
			return strings.Join(lines[:i+1], "")
		}
	}
	return ""
}

func (c *command) help(own, kubectlFlags *pflag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n%s\nUsage:\n  kubectl quanty %s %s\n\nExamples:\n%s\nFlags:\n%s\nkubectl's flags, passed on to every kubectl it runs (only those given):\n%s",
		c.short, c.long, c.name, c.usage, strings.TrimLeft(c.examples, "\n"), own.FlagUsages(), kubectlFlags.FlagUsages())
	return b.String()
}
