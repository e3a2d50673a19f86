// Package diff is kubectl quanty diff: what changed between two points in
// an object's history.
package diff

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	objdiff "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/diff"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	short = "Show what changed between two revisions, as a unified YAML diff"
	long  = `Shows a unified diff of the object's YAML between two points in its history.
With no point, the state before its last change against now; with one
(--rev or --at), that point against now; with two, the older against the
newer. metadata.managedFields and resourceVersion are left out. A
Secret's values are masked as kubectl diff masks them ("***", and
"*** (before)" and "*** (after)" where a value changed) unless
--show-secrets.

KUBECTL_EXTERNAL_DIFF is run instead of the built-in diff, as kubectl diff
runs it: with two folders holding the object's file under the same name.
The exit status is that of kubectl diff: 0 no differences, 1 differences,
2 an error.
`
	examples = `
  # What the last change to a ConfigMap did
  kubectl quanty diff configmap/web

  # Revision 1234 against now
  kubectl quanty diff deploy/web -n shop --rev 1234

  # Between two revisions
  kubectl quanty diff cm/web --rev 1234 --rev 1300

  # Since an hour ago, with an external diff program
  KUBECTL_EXTERNAL_DIFF="diff -u" kubectl quanty diff cm/web --at -1h
`
)

// Options are diff's flags and what they resolve to.
type Options struct {
	Key         string
	Revs        []int64
	Ats         []string
	ShowSecrets bool
	// ExternalDiff is KUBECTL_EXTERNAL_DIFF.
	ExternalDiff string

	args    []string
	atsMs   []int64
	color   bool
	cluster *util.Cluster
	clock   util.Clock
	genericiooptions.IOStreams
}

// NewOptions are diff's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdDiff is kubectl quanty diff.
func NewCmdDiff(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "diff TYPE/NAME [-n NS] [--rev A | --at T1] [--rev B | --at T2] [--show-secrets]",
		Short:             short,
		Long:              long,
		Example:           examples,
		Annotations:       map[string]string{util.ErrorStatusAnnotation: "2"},
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
	fs := cmd.Flags()
	fs.SortFlags = false
	util.AddKeyFlag(cmd, &o.Key)
	fs.Int64SliceVar(&o.Revs, "rev", nil, "a revision to compare (once or twice)")
	fs.StringArrayVar(&o.Ats, "at", nil, "a time to compare (once or twice): RFC 3339, a local date-time or relative (-15m)")
	util.AddShowSecretsFlag(cmd, &o.ShowSecrets, "in the diff")
	return cmd
}

// Complete takes the arguments, KUBECTL_EXTERNAL_DIFF, and reaches the
// cluster.
func (o *Options) Complete(f *util.Factory, args []string) error {
	o.args, o.clock, o.color = args, f.Clock(), f.Color
	o.ExternalDiff = os.Getenv("KUBECTL_EXTERNAL_DIFF")
	var err error
	o.cluster, err = f.Cluster()
	return err
}

// Validate checks the points.
func (o *Options) Validate() error {
	if len(o.Revs)+len(o.Ats) > 2 {
		return errors.New("at most two points: --rev and --at, twice at most in all")
	}
	for _, r := range o.Revs {
		if r <= 0 {
			return fmt.Errorf("--rev %d: want a revision > 0", r)
		}
	}
	o.atsMs = nil
	for _, a := range o.Ats {
		ms, err := o.clock.ParseAt(a)
		if err != nil {
			return err
		}
		o.atsMs = append(o.atsMs, ms)
	}
	return nil
}

// Run reads the points and shows the diff: an ExitError 1 when they
// differ.
func (o *Options) Run(ctx context.Context) error {
	t, err := o.cluster.Target(ctx, o.args, o.Key)
	if err != nil {
		return err
	}
	var points []objdiff.Snapshot
	for _, r := range o.Revs {
		v, err := o.snapshot(ctx, &historypb.Request{Key: []byte(t.Key), Revision: r}, "revision %d")
		if err != nil {
			return err
		}
		points = append(points, v)
	}
	for i, ms := range o.atsMs {
		v, err := o.snapshot(ctx, &historypb.Request{Key: []byte(t.Key), UnixMs: ms}, "revision %d (at "+o.Ats[i]+")")
		if err != nil {
			return err
		}
		points = append(points, v)
	}
	if len(points) < 2 {
		now, err := o.snapshot(ctx, &historypb.Request{Key: []byte(t.Key)}, "revision %d (now)")
		if err != nil {
			return err
		}
		points = append(points, now)
	}
	if len(points) < 2 {
		before, err := o.beforeLastChange(ctx, t)
		if err != nil {
			return err
		}
		points = append([]objdiff.Snapshot{before}, points...)
	}
	from, to := points[0], points[1]
	if from.Rev > to.Rev {
		from, to = to, from
	}
	return o.show(t, from, to)
}

// snapshot reads one point; label has a %d for the revision of what it
// shows (objdiff.StateRevision).
func (o *Options) snapshot(ctx context.Context, req *historypb.Request, label string) (objdiff.Snapshot, error) {
	rev, kv, err := o.cluster.History.State(ctx, req)
	if err != nil {
		return objdiff.Snapshot{}, err
	}
	v := objdiff.Snapshot{Rev: rev, KV: kv, Label: fmt.Sprintf(label, objdiff.StateRevision(rev, kv))}
	if kv == nil {
		v.Label += ", absent"
	}
	return v, nil
}

// beforeLastChange is the state before the object's newest change.
func (o *Options) beforeLastChange(ctx context.Context, t util.Target) (objdiff.Snapshot, error) {
	entries, err := o.cluster.History.Log(ctx, &historypb.Request{Key: []byte(t.Key)})
	if err != nil {
		return objdiff.Snapshot{}, err
	}
	if len(entries) == 0 {
		return objdiff.Snapshot{}, fmt.Errorf("no history found for %s", t)
	}
	last := entries[len(entries)-1]
	rev := last.GetRevision() - 1
	switch prev := last.GetPrevKv(); {
	case prev != nil:
		return objdiff.Snapshot{Rev: rev, KV: prev, Label: fmt.Sprintf("revision %d", prev.ModRevision)}, nil
	case last.GetKv().GetVersion() == 1:
		return objdiff.Snapshot{Rev: rev, Label: fmt.Sprintf("revision %d, absent", rev)}, nil
	}
	return objdiff.Snapshot{}, fmt.Errorf("the state of %s before revision %d is no longer retained", t, last.GetRevision())
}

func (o *Options) show(t util.Target, from, to objdiff.Snapshot) error {
	a, b, err := objdiff.Texts(from, to, o.ShowSecrets)
	if err != nil {
		return err
	}
	if o.ExternalDiff != "" {
		// The program's output is its own, and may be painted: it goes out
		// raw, and what it reads, the files, is escaped instead.
		differs, err := objdiff.External(o.ExternalDiff, t.DiffFile(),
			objdiff.Side{Label: fmt.Sprintf("FROM-REV-%d", from.Rev), Text: terminal.EscapeString(a)},
			objdiff.Side{Label: fmt.Sprintf("TO-REV-%d", to.Rev), Text: terminal.EscapeString(b)},
			terminal.RawOf(o.Out), terminal.RawOf(o.ErrOut))
		if err != nil {
			return err
		}
		if differs {
			return &util.ExitError{Code: 1}
		}
		return nil
	}
	d := objdiff.Unified(fmt.Sprintf("%s (%s)", t.NameOnly(), from.Label), fmt.Sprintf("%s (%s)", t.NameOnly(), to.Label), a, b)
	if d == "" {
		return nil
	}
	if err := terminal.WriteDiff(o.Out, d, o.color); err != nil {
		return err
	}
	return &util.ExitError{Code: 1}
}
