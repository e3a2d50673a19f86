// Package undelete is kubectl quanty undelete: a deleted namespace brought
// back with every object deleted with it.
package undelete

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/restore"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	short = "Undo a namespace deletion: the namespace and every object deleted with it"
	long  = `Brings back a deleted namespace as it was just before its deletion began
(or at TIME, which must be before that), then every object deleted from it
since, as it was then, with its old uid: RBAC, ServiceAccounts, ConfigMaps
and Secrets first, then the rest, workloads and Pods last, so that what
each one refers to is back before the controllers and kubelets act on it.
Like every restore, each object is written to the datastore only after
kube-apiserver has accepted the same write from you as a dry run: RBAC,
validation and admission (webhooks, Pod Security, quotas) judge it, and
one they refuse is named with their reason and not written. What is
written is the object exactly as it was stored, old uid included.

Objects a controller recreates by itself are skipped, and named: anything
with a controller owner (a ReplicaSet of a Deployment, the Pods of a
ReplicaSet, a Service's EndpointSlices), a Service's Endpoints, ServiceAccount
token Secrets, the default ServiceAccount and the kube-root-ca.crt ConfigMap.
Events are not restored: they expire by themselves. A resource QuantyKube
keeps for less time than has passed since the deletion (leases, by default)
is named as not read. --dry-run lists exactly what would be written.
`
	examples = `
  # See what would come back
  kubectl quanty undelete namespace shop --dry-run

  # Bring it back, after confirming
  kubectl quanty undelete namespace shop

  # As it was at a time before the deletion, without asking (scripts)
  kubectl quanty undelete namespace shop --at 2026-05-01T12:00:00Z --yes
`
)

// Options are undelete's flags and what they resolve to.
type Options struct {
	At     string
	DryRun bool
	Yes    bool
	Output *util.Output

	name    string
	atMs    int64
	cluster *util.Cluster
	clock   util.Clock
	prompt  *util.Prompter
	genericiooptions.IOStreams
}

// NewOptions are undelete's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdUndelete is kubectl quanty undelete.
func NewCmdUndelete(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "undelete namespace NAME [--at TIME] [--dry-run] [--yes] [-o text|json|yaml]",
		Short:             short,
		Long:              long,
		Example:           examples,
		ValidArgsFunction: util.CompleteDeletedNamespace(f),
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
	fs.StringVar(&o.At, "at", "", "restore as at TIME, before the deletion began (default: just before it)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "list what would be written, write nothing")
	fs.BoolVar(&o.Yes, "yes", false, "do not ask")
	o.Output = util.AddOutputFlag(cmd, "text", "json", "yaml")
	return cmd
}

// Complete takes the namespace's name and reaches the cluster.
func (o *Options) Complete(f *util.Factory, args []string) error {
	if len(args) != 2 || (args[0] != "namespace" && args[0] != "ns" && args[0] != "namespaces") {
		return errors.New("want: undelete namespace NAME")
	}
	o.name, o.clock = args[1], f.Clock()
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
	if o.At != "" {
		var err error
		if o.atMs, err = o.clock.ParseAt(o.At); err != nil {
			return err
		}
	}
	return nil
}

// Run plans the undelete, shows it, asks, and writes it.
func (o *Options) Run(ctx context.Context) error {
	p, err := o.plan(ctx)
	if err != nil {
		return err
	}
	return o.undelete(ctx, p)
}

// report is what undelete prints with -o json or yaml.
type report struct {
	Namespace string            `json:"namespace"`
	Revision  int64             `json:"revision"`
	DryRun    bool              `json:"dryRun,omitempty"`
	Restored  []restore.Result  `json:"restored"`
	Skipped   []util.SkipReport `json:"skipped"`
	Unread    []string          `json:"unread,omitempty"`
	Warnings  []string          `json:"warnings,omitempty"`
}

func (o *Options) undelete(ctx context.Context, p *plan) error {
	rep := report{Namespace: p.ns.Object.Name, Revision: p.at, DryRun: o.DryRun, Unread: p.unread, Warnings: p.orphans, Skipped: []util.SkipReport{}}
	all := append([]util.Candidate{p.ns}, p.restore...)
	tw := terminal.NewTabular(o.ErrOut, 2)
	fmt.Fprintf(tw, "Namespace %s was deleted at revision %d; restoring it and %d objects as they were at revision %d:\n", p.ns.Object.Name, p.deletedAt, len(p.restore), p.at)
	for i, c := range all {
		fmt.Fprintf(tw, "  %d.\t%s\t%s\n", i+1, c, util.Dash(c.Object.Namespace))
	}
	if len(p.skipped) > 0 {
		fmt.Fprintln(tw, "Skipped:")
	}
	for _, sk := range p.skipped {
		fmt.Fprintf(tw, "  -\t%s\t%s\n", sk.Candidate, sk.Reason)
		rep.Skipped = append(rep.Skipped, util.SkipReport{Object: sk.Candidate.String(), Reason: sk.Reason})
	}
	for _, u := range p.unread {
		fmt.Fprintf(tw, "Not read (so not restored): %s\n", u)
	}
	for _, w := range p.orphans {
		fmt.Fprintf(tw, "Warning: %s\n", w)
	}
	tw.Flush()
	if !o.DryRun {
		ok, err := o.prompt.Confirm(fmt.Sprintf("Restore namespace %s and %d objects?", p.ns.Object.Name, len(p.restore)), false, o.Yes)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not restored")
		}
	}
	var failed []string
	for _, c := range all {
		r := restore.Result{Object: c.String(), Key: c.Key, Revision: p.at, Action: "create", DryRun: o.DryRun}
		if !o.DryRun {
			// Only where the object is still gone, as listed: one created
			// again since is not overwritten.
			resp, err := o.cluster.History.Restore(ctx, &historypb.Request{Key: []byte(c.Key), Revision: p.at, IfModRevision: proto.Int64(0)})
			if errors.Is(err, api.ErrConflict) {
				err = fmt.Errorf("created again since the list above, so not overwritten (%w)", err)
			}
			if err != nil {
				if c.Key == p.ns.Key {
					return fmt.Errorf("restoring namespace %s: %w", p.ns.Object.Name, err)
				}
				failed = append(failed, fmt.Sprintf("%s: %v", c, err))
				fmt.Fprintf(o.ErrOut, "error: restoring %s: %v\n", c, err)
				continue
			}
			r.NewRevision = resp.GetNewRevision()
		}
		rep.Restored = append(rep.Restored, r)
		if o.Output.Format == "text" {
			fmt.Fprintln(o.Out, r.Line())
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
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d objects were not restored", len(failed), len(p.restore))
	}
	return nil
}
