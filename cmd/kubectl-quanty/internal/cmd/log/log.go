// Package log is kubectl quanty log: the revisions of one object.
package log

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	short = "List an object's revisions: when, what happened, which fields changed"
	long  = `Lists every retained change to one object, newest first: its revision, how
long ago and when, what happened (created, updated, deleted, restored) and
which fields changed, as paths (spec.replicas, data.color). A change that
wrote back the exact value of an earlier revision (what restore does) is
"restored", with that revision.
`
	examples = `
  # The history of a ConfigMap in the current namespace
  kubectl quanty log configmap/web

  # Changes to a Deployment in the last two hours, oldest first
  kubectl quanty log deploy/web -n shop --since 2h --reverse

  # The last five changes of a custom resource, as JSON for a script
  kubectl quanty log widgets.example.com/blue --limit 5 -o json

  # A raw storage key
  kubectl quanty log --key /registry/services/specs/default/kubernetes
`
)

// Options are log's flags and what they resolve to.
type Options struct {
	Key          string
	Since, Until string
	Limit        int
	Reverse      bool
	Output       *util.Output

	args    []string
	cluster *util.Cluster
	clock   util.Clock
	sinceMs int64
	untilMs int64
	genericiooptions.IOStreams
}

// NewOptions are log's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdLog is kubectl quanty log.
func NewCmdLog(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "log TYPE/NAME [-n NS] [--since TIME] [--until TIME] [--limit N] [--reverse] [-o table|json|yaml]",
		Short:             short,
		Long:              long,
		Example:           examples,
		ValidArgsFunction: util.CompleteObject(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().SortFlags = false
	util.AddKeyFlag(cmd, &o.Key)
	cmd.Flags().StringVar(&o.Since, "since", "", "only changes at or after TIME (or a duration: 1h means an hour ago)")
	cmd.Flags().StringVar(&o.Until, "until", "", "only changes at or before TIME (or a duration ago)")
	cmd.Flags().IntVar(&o.Limit, "limit", 0, "only the N newest changes (0: every change)")
	cmd.Flags().BoolVar(&o.Reverse, "reverse", false, "oldest first")
	o.Output = util.AddOutputFlag(cmd, "table", "json", "yaml")
	return cmd
}

// Complete takes the arguments and reaches the cluster.
func (o *Options) Complete(f *util.Factory, args []string) error {
	o.args, o.clock = args, f.Clock()
	var err error
	o.cluster, err = f.Cluster()
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if o.Limit < 0 {
		return fmt.Errorf("--limit %d: want N >= 0 (0: every change)", o.Limit)
	}
	var err error
	if o.Since != "" {
		if o.sinceMs, err = o.clock.ParseSince("since", o.Since); err != nil {
			return err
		}
	}
	if o.Until != "" {
		if o.untilMs, err = o.clock.ParseSince("until", o.Until); err != nil {
			return err
		}
	}
	return nil
}

// Run reads the object's log and prints it.
func (o *Options) Run(ctx context.Context) error {
	t, err := o.cluster.Target(ctx, o.args, o.Key)
	if err != nil {
		return err
	}
	// The whole retained log, even with --since: a restore is told by the
	// earlier revision it wrote back, and a --since before the retention
	// window is not an error.
	entries, err := o.cluster.History.Log(ctx, &historypb.Request{Key: []byte(t.Key)})
	if err != nil {
		return err
	}
	rows := slices.DeleteFunc(objects.Changes(entries), func(r objects.Change) bool {
		return r.UnixMs < o.sinceMs || o.untilMs > 0 && r.UnixMs > o.untilMs
	})
	if o.Limit > 0 && len(rows) > o.Limit {
		rows = rows[len(rows)-o.Limit:]
	}
	if !o.Reverse {
		slices.Reverse(rows)
	}
	return o.print(t, rows)
}

func (o *Options) print(t util.Target, rows []objects.Change) error {
	if o.Output.Format != "table" {
		for i := range rows {
			rows[i].Time = o.clock.When(rows[i].UnixMs)
		}
		if rows == nil {
			rows = []objects.Change{}
		}
		doc := map[string]any{"object": t.String(), "key": t.Key, "revisions": rows}
		b, err := terminal.Render(doc, o.Output.Format)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintf(o.ErrOut, "No history found for %s.\n", t)
		return nil
	}
	tw := terminal.NewTabular(o.Out, 3)
	fmt.Fprintln(tw, "REVISION\tAGE\tTIME\tACTION\tCHANGES")
	for _, r := range rows {
		action := r.Action
		if r.RestoredFrom != 0 {
			action = fmt.Sprintf("restored (revision %d)", r.RestoredFrom)
		}
		changes := objects.Summarize(r.Changes)
		if r.Note != "" {
			changes = "(" + r.Note + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Revision, o.clock.Age(r.UnixMs), o.clock.When(r.UnixMs), action, changes)
	}
	return tw.Flush()
}
