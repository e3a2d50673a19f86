// Package revert is kubectl quanty revert: every object of a namespace
// changed since a time put back as it was then.
package revert

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	objdiff "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/diff"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	short = "Put every object of a namespace changed since a time back as it was then"
	long  = `Undoes every change made in a namespace after TIME (or after revision N):
each object changed since is restored as it was then, each one deleted
since is re-created with its old uid, and each one created since is
deleted. Without TYPE, every type in the namespace but Events; -l keeps
the objects whose labels matched the selector then (now, for one created
since).

Objects a controller makes again from what is reverted are skipped, and
named, as undelete skips them: those with a controller owner (a
Deployment's ReplicaSets, their Pods), a Service's Endpoints,
ServiceAccount tokens, the default ServiceAccount and kube-root-ca.crt.

It shows the whole plan first, as a table (and, with --diff, a diff per
object from now to then), and writes nothing without a yes: --yes answers
for scripts, --dry-run only shows. Each write goes through the restore
endpoint, so kube-apiserver checks it as it would check the same write
from you; one it refuses is named with its reason, and the rest still go.
An object that changed again after the plan was read is left alone, and
named. The exit status is 1 if any object was not reverted.
`
	examples = `
  # What would undo the last half hour in the namespace shop
  kubectl quanty revert -n shop --since 30m --dry-run --diff

  # Undo it, after confirming
  kubectl quanty revert -n shop --since 2026-05-01T03:00:00Z

  # Only the Deployments and ConfigMaps labelled app=web, back to revision 1790
  kubectl quanty revert -n shop --to-rev 1790 deployments,configmaps -l app=web --yes
`
)

// Options are revert's flags and what they resolve to.
type Options struct {
	Since       string
	ToRev       int64
	Selector    string
	DryRun      bool
	Diff        bool
	Yes         bool
	ShowSecrets bool
	Output      *util.Output

	args    []string
	sel     labels.Selector
	sinceMs int64
	color   bool
	cluster *util.Cluster
	clock   util.Clock
	prompt  *util.Prompter
	genericiooptions.IOStreams
}

// NewOptions are revert's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdRevert is kubectl quanty revert.
func NewCmdRevert(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "revert -n NS (--since TIME | --to-rev N) [TYPE[,TYPE...]...] [-l SELECTOR] [--dry-run] [--diff] [--yes] [--show-secrets] [-o text|json|yaml]",
		Short:             short,
		Long:              long,
		Example:           examples,
		ValidArgsFunction: util.CompleteTypes(f, -1),
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
	fs.StringVar(&o.Since, "since", "", "undo the changes at or after TIME (or a duration: 1h means an hour ago)")
	fs.Int64Var(&o.ToRev, "to-rev", 0, "undo the changes after revision N")
	fs.StringVarP(&o.Selector, "selector", "l", "", "only objects whose labels match (as kubectl -l), as they were then")
	fs.BoolVar(&o.DryRun, "dry-run", false, "show the plan, write nothing")
	fs.BoolVar(&o.Diff, "diff", false, "show a diff per object, from now to then")
	fs.BoolVar(&o.Yes, "yes", false, "do not ask")
	util.AddShowSecretsFlag(cmd, &o.ShowSecrets, "in the diffs")
	o.Output = util.AddOutputFlag(cmd, "text", "json", "yaml")
	return cmd
}

// Complete takes the arguments and reaches the cluster.
func (o *Options) Complete(f *util.Factory, args []string) error {
	o.args, o.clock, o.color = args, f.Clock(), f.Color
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
	var err error
	if o.sel, err = util.ParseSelector(o.Selector); err != nil {
		return err
	}
	switch {
	case o.Since != "" && o.ToRev != 0:
		return errors.New("--since and --to-rev exclude each other")
	case o.ToRev < 0:
		return fmt.Errorf("--to-rev %d: want a revision > 0", o.ToRev)
	case o.ToRev > 0:
	case o.Since != "":
		if o.sinceMs, err = o.clock.PastTime("since", o.Since); err != nil {
			return err
		}
	default:
		return errors.New("want --since TIME or --to-rev N: the point to go back to")
	}
	return nil
}

// Run plans the revert, shows it, asks, and writes it.
func (o *Options) Run(ctx context.Context) error {
	p, err := o.plan(ctx)
	if err != nil {
		return err
	}
	return o.revert(ctx, p)
}

// result is what was done to one object, as -o json prints it.
type result struct {
	Object      string   `json:"object"`
	Key         string   `json:"key"`
	Action      string   `json:"action"`
	Revision    int64    `json:"revision"`
	Changes     []string `json:"changes,omitempty"`
	NewRevision int64    `json:"newRevision,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// report is revert's -o json and -o yaml.
type report struct {
	Namespace string            `json:"namespace"`
	Revision  int64             `json:"revision"`
	DryRun    bool              `json:"dryRun,omitempty"`
	Objects   []result          `json:"objects"`
	Skipped   []util.SkipReport `json:"skipped"`
	Unread    []string          `json:"unread,omitempty"`
}

func (o *Options) revert(ctx context.Context, p *plan) error {
	rep := report{Namespace: p.ns, Revision: p.point, DryRun: o.DryRun, Objects: []result{}, Skipped: []util.SkipReport{}}
	if err := o.showPlan(p); err != nil {
		return err
	}
	for _, sk := range p.skipped {
		rep.Skipped = append(rep.Skipped, util.SkipReport{Object: sk.Candidate.String(), Reason: sk.Reason})
	}
	rep.Unread = p.unread
	if len(p.items) > 0 && !o.DryRun {
		ok, err := o.prompt.Confirm(fmt.Sprintf("Revert %d objects in namespace %s to revision %d?", len(p.items), p.ns, p.point), false, o.Yes)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not reverted")
		}
	}
	failed := 0
	for _, it := range p.items {
		r := result{Object: it.String(), Key: it.Key, Action: it.action, Revision: it.rev, Changes: it.changes}
		if !o.DryRun {
			// Only over the state the plan showed (its mod_revision now, 0
			// for absent): an object changed since is left alone.
			resp, err := o.cluster.History.Restore(ctx, &historypb.Request{Key: []byte(it.Key), Revision: it.rev, IfModRevision: proto.Int64(it.nowRev)})
			switch {
			case errors.Is(err, api.ErrConflict):
				err = fmt.Errorf("changed since the plan was read, so left alone (%w)", err)
			case err == nil && resp.GetNewRevision() == 0:
				err = errors.New("nothing written: it was already as it was then")
			}
			if err != nil {
				failed++
				r.Error = err.Error()
				fmt.Fprintf(o.ErrOut, "error: %s %s: %v\n", it.action, it, err)
			} else {
				r.NewRevision = resp.GetNewRevision()
			}
		}
		rep.Objects = append(rep.Objects, r)
		if o.Output.Format == "text" && r.Error == "" {
			fmt.Fprintln(o.Out, r.line(o.DryRun))
		}
	}
	if o.Output.Format != "text" {
		b, err := terminal.Render(rep, o.Output.Format)
		if err != nil {
			return err
		}
		if _, err := o.Out.Write(b); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d objects were not reverted", failed, len(p.items))
	}
	return nil
}

func (r result) line(dryRun bool) string {
	done := map[string]string{"restore": "restored", "re-create": "re-created", "delete": "deleted"}[r.Action]
	if dryRun {
		return fmt.Sprintf("%s: would be %s as at revision %d (dry run)", r.Object, done, r.Revision)
	}
	return fmt.Sprintf("%s %s as at revision %d (new revision %d)", r.Object, done, r.Revision, r.NewRevision)
}

// showPlan prints the plan on standard error, where the question is: the
// table, what is skipped and not read, and the diffs.
func (o *Options) showPlan(p *plan) error {
	if len(p.items) == 0 {
		fmt.Fprintf(o.ErrOut, "Nothing to revert in namespace %s: no object changed after %s (revision %d).\n", p.ns, p.label, p.point)
	} else {
		fmt.Fprintf(o.ErrOut, "Reverting %d objects in namespace %s to revision %d (%s):\n", len(p.items), p.ns, p.point, p.label)
		tw := terminal.NewTabular(o.ErrOut, 3)
		fmt.Fprintln(tw, "ACTION\tOBJECT\tNOW\tTHEN\tCHANGES")
		for _, it := range p.items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.action, it, revOrAbsent(it.nowRev), revOrAbsent(it.then.GetModRevision()), objects.Summarize(it.changes))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	tw := terminal.NewTabular(o.ErrOut, 2)
	if len(p.skipped) > 0 {
		fmt.Fprintln(tw, "Skipped (a controller makes them again):")
	}
	for _, sk := range p.skipped {
		fmt.Fprintf(tw, "  -\t%s\t%s\n", sk.Candidate, sk.Reason)
	}
	for _, u := range p.unread {
		fmt.Fprintf(tw, "Not read (so not reverted): %s\n", u)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !o.Diff {
		return nil
	}
	for _, it := range p.items {
		from := objdiff.Snapshot{KV: it.now, Label: "now"}
		to := objdiff.Snapshot{KV: it.then, Label: fmt.Sprintf("revision %d", it.rev)}
		d, err := objdiff.Of(it.String(), from, to, o.ShowSecrets)
		if err != nil {
			return err
		}
		if err := terminal.WriteDiff(o.ErrOut, d, o.color); err != nil {
			return err
		}
	}
	return nil
}

// revOrAbsent is a state's revision, or that there was none.
func revOrAbsent(r int64) string {
	if r == 0 {
		return "(absent)"
	}
	return fmt.Sprint(r)
}
