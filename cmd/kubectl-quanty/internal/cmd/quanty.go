// Package cmd is kubectl quanty's command tree, built as kubectl builds
// its own: one package per command under it, each with an Options struct
// (Complete, Validate, Run) and a NewCmd function on cobra, sharing the
// Factory of package util (util.Execute runs a command line and says its
// exit status).
package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/blame"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/changes"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/deleted"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/diff"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/get"
	logcmd "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/log"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/restore"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/revert"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/ui"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/undelete"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
)

const overview = `kubectl quanty: the history of Kubernetes objects kept by QuantyKube, and undo.

Every command goes through kubectl (kubectl get --raw, kubectl create --raw)
to the aggregated API quanty.quantyroot.io/v1alpha1, with each of kubectl's
global flags that is given passed on (--kubeconfig, --context,
-n/--namespace, --as, --server, --token, ...: kubectl options lists them);
ui reads the same flags and kubeconfig as kubectl does, for its proxy.
TYPE is what kubectl takes: a resource, its singular, kind or short name,
optionally with .GROUP (deploy, deployments.apps, Widget.example.com).
TIME is RFC 3339 (2026-05-01T12:00:00Z), a local date-time
(2026-05-01 14:00), "now", or relative to now: -15m, -2h, -1d.
`

// NewCmdQuanty is kubectl quanty: the history commands, completion and
// version. Everything it prints goes through a terminal.Screen.
func NewCmdQuanty(f *util.Factory, streams genericiooptions.IOStreams, version string) *cobra.Command {
	streams.Out, streams.ErrOut = terminal.NewScreen(streams.Out), terminal.NewScreen(streams.ErrOut)
	// The commands in the order below (the overview's, and the
	// completion's), as kubectl keeps its own.
	cobra.EnableCommandSorting = false
	root := &cobra.Command{
		Use:   "kubectl-quanty",
		Short: "The history of Kubernetes objects kept by QuantyKube, and undo",
		Long:  overview,
		// The plugin's name, as kubectl runs it, in help and errors.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl quanty"},
		Version:     version,
		// Alone, it shows what it does and fails, as kubectl does for a
		// command group.
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(streams.Out, overviewOf(cmd))
			return &util.ExitError{Code: 1}
		},
	}
	root.SetVersionTemplate("kubectl-quanty {{.Version}}\n")
	util.SetupRoot(root, f, streams)

	for _, c := range []*cobra.Command{
		logcmd.NewCmdLog(f, streams),
		get.NewCmdGet(f, streams),
		diff.NewCmdDiff(f, streams),
		restore.NewCmdRestore(f, streams),
		deleted.NewCmdDeleted(f, streams),
		undelete.NewCmdUndelete(f, streams),
		blame.NewCmdBlame(f, streams),
		revert.NewCmdRevert(f, streams),
		changes.NewCmdChanges(f, streams),
		ui.NewCmdUI(f, streams),
	} {
		c.Annotations = withAnnotation(c.Annotations, historyCommand, "true")
		root.AddCommand(c)
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print kubectl-quanty's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "kubectl-quanty %s\n", version)
			return err
		},
	})
	// cobra's completion command: bash, zsh, fish, powershell.
	root.InitDefaultCompletionCmd()
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		if cmd == root {
			fmt.Fprint(cmd.OutOrStdout(), overviewOf(root))
			return
		}
		fmt.Fprint(cmd.OutOrStdout(), help(cmd, f))
	})
	return root
}

// historyCommand marks the commands the overview lists first.
const historyCommand = "kubectl-quanty/history"

func withAnnotation(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// overviewOf is kubectl quanty --help: what it is, its commands with the
// first example of each, and where to look next.
func overviewOf(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString(overview)
	b.WriteString("\nCommands:\n")
	var others []*cobra.Command
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" {
			continue
		}
		if c.Annotations[historyCommand] == "" {
			others = append(others, c)
			continue
		}
		fmt.Fprintf(&b, "  %-10s %s\n", c.Name(), c.Short)
	}
	b.WriteString("\nOther commands:\n")
	for _, c := range others {
		fmt.Fprintf(&b, "  %-10s %s\n", c.Name(), c.Short)
	}
	b.WriteString("\nExamples:\n")
	for _, c := range root.Commands() {
		if c.Annotations[historyCommand] != "" {
			b.WriteString(firstExample(c.Example))
		}
	}
	b.WriteString("\nRun 'kubectl quanty COMMAND --help' for a command's flags and more examples,\n" +
		"'kubectl quanty completion --help' for shell completion (kubectl quanty <TAB>: docs/KUBECTL-QUANTY.md),\n" +
		"'kubectl quanty version' for the version.\n")
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

// help is a command's --help: what it does, its usage and examples, its
// own flags (with --etcd-prefix), then kubectl's, which it passes on.
func help(cmd *cobra.Command, f *util.Factory) string {
	own := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	own.SortFlags = false
	cmd.LocalFlags().VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "help" && f.KubectlFlags.Lookup(fl.Name) == nil {
			own.AddFlag(fl)
		}
	})
	cmd.InheritedFlags().VisitAll(func(fl *pflag.Flag) {
		if f.KubectlFlags.Lookup(fl.Name) == nil {
			own.AddFlag(fl)
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", cmd.Short)
	if cmd.Long != "" {
		fmt.Fprintf(&b, "%s\n", cmd.Long)
	}
	use := cmd.Use
	if cmd.HasParent() {
		use = cmd.Parent().CommandPath() + " " + use
	}
	fmt.Fprintf(&b, "Usage:\n  %s\n", use)
	if cmd.HasAvailableSubCommands() {
		b.WriteString("\nCommands:\n")
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				fmt.Fprintf(&b, "  %-11s %s\n", c.Name(), c.Short)
			}
		}
	}
	if cmd.Example != "" {
		fmt.Fprintf(&b, "\nExamples:\n%s", strings.TrimLeft(cmd.Example, "\n"))
	}
	if own.HasFlags() {
		fmt.Fprintf(&b, "\nFlags:\n%s", own.FlagUsages())
	}
	if cmd.Annotations[ui.RESTConfigAnnotation] != "" {
		fmt.Fprintf(&b, "\nkubectl's flags, read as kubectl reads them to reach the cluster:\n%s", f.KubectlFlags.FlagUsages())
	} else {
		fmt.Fprintf(&b, "\nkubectl's flags, passed on to every kubectl it runs (only those given):\n%s", f.KubectlFlags.FlagUsages())
	}
	return b.String()
}
