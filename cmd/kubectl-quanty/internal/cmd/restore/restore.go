// Package restore is kubectl quanty restore: an object written back as it
// was at a revision or a time, after its diff from now and a question.
package restore

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	objdiff "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/diff"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	short = "Write an object back as it was at a revision or a time"
	long  = `Writes the object back as it was at revision N or at TIME: its old value,
uid included, or a delete if it did not exist then, as an ordinary new
revision that kube-apiserver and its watchers see. It shows the diff from
now and asks before writing; --yes answers for scripts, --dry-run only
shows. A Secret's values are masked in the diff unless --show-secrets.

It warns, and offers the revision from before the deletion began, when
the revision is one of an object being deleted (deletionTimestamp set:
restored as it was, it would go on being deleted).

It warns when an owner in its ownerReferences no longer exists: the
garbage collector would delete it again. It restores no owner on its own:
--with-owners restores first each gone owner that is its controller
(ownerReferences' controller: true) in its namespace, and that owner's
own controller if gone too, after listing each with the revision it
restores; asked instead, the answer is no unless you say yes; with
--yes or --dry-run alone, no owner is restored. A cluster-scoped owner is
never restored, nor an owner that is not its controller: restore it
yourself if it should come back.
`
	examples = `
  # Bring back a ConfigMap as it was at revision 1234, after looking at the diff
  kubectl quanty restore configmap/web --rev 1234

  # As it was ten minutes ago, without asking (scripts)
  kubectl quanty restore deploy/web -n shop --at -10m --yes

  # Only show what would be written
  kubectl quanty restore secret/db --rev 1234 --dry-run

  # A ReplicaSet whose Deployment was deleted too: the Deployment first
  kubectl quanty restore rs/web-5d8 -n shop --rev 1234 --with-owners
`
)

// Options are restore's flags and what they resolve to.
type Options struct {
	Key         string
	Point       util.Point
	DryRun      bool
	Yes         bool
	WithOwners  bool
	ShowSecrets bool
	Output      *util.Output

	args    []string
	cluster *util.Cluster
	clock   util.Clock
	prompt  *util.Prompter
	genericiooptions.IOStreams
}

// NewOptions are restore's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdRestore is kubectl quanty restore.
func NewCmdRestore(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "restore TYPE/NAME (--rev N | --at TIME) [-n NS] [--dry-run] [--yes] [--with-owners] [--show-secrets] [-o text|json|yaml]",
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
	fs := cmd.Flags()
	fs.SortFlags = false
	util.AddKeyFlag(cmd, &o.Key)
	o.Point.AddFlags(fs, "to restore")
	fs.BoolVar(&o.DryRun, "dry-run", false, "show what would be written, write nothing")
	fs.BoolVar(&o.Yes, "yes", false, "do not ask: restore (and take the revision offered from before a deletion began; owners only with --with-owners)")
	fs.BoolVar(&o.WithOwners, "with-owners", false, "restore first each gone owner that is its controller in its namespace, after listing them")
	util.AddShowSecretsFlag(cmd, &o.ShowSecrets, "in the diff")
	o.Output = util.AddOutputFlag(cmd, "text", "json", "yaml")
	return cmd
}

// Complete takes the arguments and reaches the cluster.
func (o *Options) Complete(f *util.Factory, args []string) error {
	o.args, o.clock = args, f.Clock()
	o.prompt = util.NewPrompter(o.In, o.ErrOut)
	var err error
	o.cluster, err = f.Cluster()
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	return o.Point.Validate(true)
}

// Run reads the state to restore, its owners, and restores them.
func (o *Options) Run(ctx context.Context) error {
	t, err := o.cluster.Target(ctx, o.args, o.Key)
	if err != nil {
		return err
	}
	req, err := o.Point.Request(t.Key, o.clock)
	if err != nil {
		return err
	}
	rev, old, err := o.cluster.History.State(ctx, req)
	if err != nil {
		return err
	}
	if rev, old, err = o.checkDeleting(ctx, t, rev, old); err != nil {
		return err
	}
	if err := o.restoreOwners(ctx, t, old); err != nil {
		return err
	}
	res, err := o.restoreTo(ctx, t, rev, old)
	if err != nil {
		return err
	}
	return o.report(res)
}

// Result is what a restore did, as -o json prints it.
type Result struct {
	Object      string `json:"object"`
	Key         string `json:"key"`
	Revision    int64  `json:"revision"`
	Action      string `json:"action"` // create, update, delete, none
	DryRun      bool   `json:"dryRun,omitempty"`
	NewRevision int64  `json:"newRevision,omitempty"`
}

func (o *Options) report(r Result) error {
	if o.Output.Format == "text" {
		_, err := fmt.Fprintln(o.Out, r.Line())
		return err
	}
	b, err := terminal.Render(r, o.Output.Format)
	if err != nil {
		return err
	}
	_, err = o.Out.Write(b)
	return err
}

// Line is what a restore did, for people.
func (r Result) Line() string {
	switch {
	case r.Action == "none":
		return fmt.Sprintf("%s is already as it was at revision %d: nothing to restore", r.Object, r.Revision)
	case r.DryRun:
		return fmt.Sprintf("%s: would %s it as it was at revision %d (dry run)", r.Object, r.Action, r.Revision)
	case r.NewRevision == 0:
		return fmt.Sprintf("%s was already as it was at revision %d: nothing written", r.Object, r.Revision)
	}
	return fmt.Sprintf("%s restored to revision %d (new revision %d)", r.Object, r.Revision, r.NewRevision)
}

// errDeclined is a restore answered no.
var errDeclined = errors.New("not restored")

// restoreTo shows the diff from now to the state at rev (old), asks, and
// writes it back.
func (o *Options) restoreTo(ctx context.Context, t util.Target, rev int64, old *mvccpb.KeyValue) (Result, error) {
	r := Result{Object: t.String(), Key: t.Key, Revision: rev, DryRun: o.DryRun}
	nowRev, cur, err := o.cluster.History.State(ctx, &historypb.Request{Key: []byte(t.Key)})
	if err != nil {
		return r, err
	}
	switch {
	case cur == nil && old == nil || cur != nil && old != nil && string(cur.Value) == string(old.Value):
		r.Action = "none"
		return r, nil
	case cur == nil:
		r.Action = "create"
	case old == nil:
		r.Action = "delete"
	default:
		r.Action = "update"
	}
	from := objdiff.Snapshot{Rev: nowRev, KV: cur, Label: fmt.Sprintf("revision %d (now)", objdiff.StateRevision(nowRev, cur))}
	to := objdiff.Snapshot{Rev: rev, KV: old, Label: fmt.Sprintf("revision %d", rev)}
	d, err := objdiff.Of(t.NameOnly(), from, to, o.ShowSecrets)
	if err != nil {
		return r, err
	}
	fmt.Fprint(o.ErrOut, d)
	if o.DryRun {
		return r, nil
	}
	ok, err := o.prompt.Confirm(fmt.Sprintf("Restore %s to revision %d (%s)?", t, rev, r.Action), false, o.Yes)
	if err != nil {
		return r, err
	}
	if !ok {
		return r, errDeclined
	}
	// Only over the state the diff showed: a change made while the
	// question was read is not overwritten.
	resp, err := o.cluster.History.Restore(ctx, &historypb.Request{Key: []byte(t.Key), Revision: rev, IfModRevision: proto.Int64(cur.GetModRevision())})
	if errors.Is(err, api.ErrConflict) {
		return r, fmt.Errorf("not restored: %s changed since the diff; run it again (%w)", t, err)
	}
	if err != nil {
		return r, fmt.Errorf("restoring %s: %w", t, err)
	}
	r.NewRevision = resp.GetNewRevision()
	return r, nil
}

// checkDeleting warns when the state to restore is one of an object being
// deleted, and offers the newest state from before its deletion began.
func (o *Options) checkDeleting(ctx context.Context, t util.Target, rev int64, old *mvccpb.KeyValue) (int64, *mvccpb.KeyValue, error) {
	why := objects.BeingDeleted(old)
	if why == "" {
		return rev, old, nil
	}
	fmt.Fprintf(o.ErrOut, "Warning: at revision %d, %s was being deleted (%s): restored as it was, it would go on being deleted.\n", rev, t, why)
	entries, err := o.cluster.History.Log(ctx, &historypb.Request{Key: []byte(t.Key)})
	if err != nil {
		return 0, nil, err
	}
	before, kv, ok := objects.Restorable(entries, rev)
	if !ok {
		fmt.Fprintf(o.ErrOut, "The history holds no state of %s from before its deletion began.\n", t)
		return rev, old, nil
	}
	take, err := o.prompt.Confirm(fmt.Sprintf("Restore revision %d instead, from before its deletion began?", before), true, o.Yes || o.DryRun)
	if err != nil {
		return 0, nil, err
	}
	if take {
		fmt.Fprintf(o.ErrOut, "Restoring revision %d, from before the deletion began.\n", before)
		return before, kv, nil
	}
	return rev, old, nil
}
