// Package blame is kubectl quanty blame: an object as YAML, each value with
// the change that last set it.
package blame

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	short = "Show an object as YAML with who last set each field, when, at which revision"
	long  = `Prints the object as YAML (as kubectl get -o yaml, without managedFields and
resourceVersion) and, beside each field that holds a value, the revision
that last set that value, how long ago, and the field manager that made
that change, as git blame does for lines. The manager comes from the
object's managedFields: the entry whose time the change moved; it is
empty where they do not say (a write without a field manager), and
"(restore)" for a value kubectl quanty restore wrote back.

It walks the object's retained history up to now, or up to --rev or
--at. A value set before the oldest change QuantyKube still holds is
shown with that oldest revision, as "<=REV": it was set then or before.
List items with a name (containers, env, ports, volumes) or a type
(conditions) are followed by it, so an item added before them does not
move their blame. A Secret's values are masked unless --show-secrets.
`
	examples = `
  # Who set each field of a Deployment, and when
  kubectl quanty blame deployment/web -n shop

  # As it was an hour ago
  kubectl quanty blame configmap/web --at -1h

  # For a script: every field's path, revision, time and manager
  kubectl quanty blame deploy/web -o json
`
)

// Options are blame's flags and what they resolve to.
type Options struct {
	Key         string
	Point       util.Point
	ShowSecrets bool
	Output      *util.Output

	args    []string
	cluster *util.Cluster
	clock   util.Clock
	genericiooptions.IOStreams
}

// NewOptions are blame's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdBlame is kubectl quanty blame.
func NewCmdBlame(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "blame TYPE/NAME [-n NS] [--rev N | --at TIME] [--show-secrets] [-o text|json|yaml]",
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
	o.Point.AddFlags(fs, "to show (default: now)")
	util.AddShowSecretsFlag(cmd, &o.ShowSecrets, "in every output format")
	o.Output = util.AddOutputFlag(cmd, "text", "json", "yaml")
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
	return o.Point.Validate(false)
}

// Run reads the object at the point and its log, and prints the blame.
func (o *Options) Run(ctx context.Context) error {
	t, err := o.cluster.Target(ctx, o.args, o.Key)
	if err != nil {
		return err
	}
	req, err := o.Point.Request(t.Key, o.clock)
	if err != nil {
		return err
	}
	rev, kv, err := o.cluster.History.State(ctx, req)
	if err != nil {
		return err
	}
	if kv == nil {
		return fmt.Errorf("%s did not exist at revision %d (kubectl quanty log lists its revisions)", t, rev)
	}
	v := objects.Decode(kv.Value)
	if v.Object == nil {
		return fmt.Errorf("%s at revision %d: %s", t, kv.ModRevision, v.Describe())
	}
	entries, err := o.cluster.History.Log(ctx, &historypb.Request{Key: []byte(t.Key)})
	if err != nil {
		return err
	}
	origins := blameOf(entries, kv.ModRevision)
	obj := v.Shown(0, false)
	if !o.ShowSecrets {
		objects.MaskSecrets(obj, nil)
	}
	return o.print(t, kv.ModRevision, obj, origins)
}
