// Package get is kubectl quanty get: an object, or every object of a type,
// as it was at a revision or a time.
package get

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
)

const (
	short = "Show an object, or every object of a type, as it was at a revision or a time"
	long  = `Prints the object as it was at revision N, or at TIME (the newest revision
committed then), as kubectl get -o yaml prints it: metadata.resourceVersion
is the revision, managedFields are left out unless asked for. A value
encrypted at rest is never printed: only kube-apiserver can decrypt it.

With a TYPE alone, it lists the objects of that type that existed then,
in the namespace (every namespace with -A), in kubectl get's columns for
the type where they can be computed from the stored object: NAME, the
type's own columns (a Pod's READY, STATUS and RESTARTS, a Deployment's
READY, UP-TO-DATE and AVAILABLE, a custom resource's
additionalPrinterColumns from its CustomResourceDefinition as it was
then), AGE (as old as each was then; with --rev, now), and NOW: same,
changed since, deleted since, or replaced (another object of that name
now). -l matches the labels they had then; -o yaml and -o json print
them as a List.

A Secret's values (data, stringData, and those in kubectl apply's
last-applied-configuration annotation) are printed as "***", in -o yaml
and -o json too, unless --show-secrets: then as stored, as kubectl get
prints them, for a script that needs them.
`
	examples = `
  # The ConfigMap as it was at revision 1234 (revisions come from kubectl quanty log)
  kubectl quanty get configmap/web --rev 1234

  # A Deployment as it was an hour ago, as JSON
  kubectl quanty get deployments.apps/web -n shop --at -1h -o json

  # As it was at a given time
  kubectl quanty get cm/web --at 2026-05-01T12:00:00Z

  # The Pods that were running an hour ago, and which are gone since
  kubectl quanty get pods -n shop --at -1h
`
)

// Options are get's flags and what they resolve to.
type Options struct {
	Key               string
	Point             util.Point
	ShowManagedFields bool
	ShowSecrets       bool
	AllNamespaces     bool
	Selector          string
	// Output is -o; "" is the form's default: YAML for one object, the
	// table for a type.
	Output *util.Output

	args    []string
	list    bool // TYPE alone
	sel     labels.Selector
	cluster *util.Cluster
	clock   util.Clock
	genericiooptions.IOStreams
}

// NewOptions are get's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams, Output: &util.Output{Formats: []string{"", "yaml", "json", "name", "wide"}}}
}

// NewCmdGet is kubectl quanty get.
func NewCmdGet(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "get (TYPE/NAME | TYPE [-A] [-l SELECTOR]) (--rev N | --at TIME) [-n NS] [-o wide|yaml|json|name] [--show-secrets]",
		Short:             short,
		Long:              long,
		Example:           examples,
		ValidArgsFunction: util.CompleteObjectOrType(f),
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
	o.Point.AddFlags(fs, "to show")
	fs.BoolVar(&o.ShowManagedFields, "show-managed-fields", false, "keep metadata.managedFields (as kubectl get)")
	util.AddShowSecretsFlag(cmd, &o.ShowSecrets, "in every output format")
	fs.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "with TYPE alone: every namespace")
	fs.StringVarP(&o.Selector, "selector", "l", "", "with TYPE alone: only objects whose labels matched (as kubectl -l) then")
	fs.StringVarP(&o.Output.Format, "output", "o", "", "output format: yaml, json, name (default yaml); for a TYPE alone, wide too (default a table)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"yaml", "json", "name", "wide"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// Complete takes the arguments and reaches the cluster.
func (o *Options) Complete(f *util.Factory, args []string) error {
	o.args, o.clock = args, f.Clock()
	o.list = o.Key == "" && len(args) == 1 && !strings.Contains(args[0], "/")
	var err error
	o.cluster, err = f.Cluster()
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if !o.list {
		if o.AllNamespaces || o.Selector != "" || o.Output.Format == "wide" {
			return errors.New("-A, -l and -o wide list a type: kubectl quanty get TYPE (without a name)")
		}
		return o.Point.Validate(true)
	}
	var err error
	if o.sel, err = util.ParseSelector(o.Selector); err != nil {
		return err
	}
	if o.AllNamespaces && o.cluster.NamespaceGiven() {
		return errors.New("-A and -n exclude each other")
	}
	return o.Point.Validate(true)
}

// Run prints the object, or lists the type.
func (o *Options) Run(ctx context.Context) error {
	if o.list {
		return o.runList(ctx)
	}
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
	if o.Output.Format == "name" {
		_, err := fmt.Fprintln(o.Out, t.NameOnly())
		return err
	}
	v := objects.Decode(kv.Value)
	if v.Object == nil {
		return fmt.Errorf("%s at revision %d: %s", t, kv.ModRevision, v.Describe())
	}
	obj := v.Shown(kv.ModRevision, o.ShowManagedFields)
	if !o.ShowSecrets {
		objects.MaskSecrets(obj, nil)
	}
	format := o.Output.Format
	if format == "" {
		format = "yaml"
	}
	b, err := terminal.Render(obj, format)
	if err != nil {
		return err
	}
	_, err = o.Out.Write(b)
	return err
}
