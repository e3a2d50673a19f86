// Package deleted is kubectl quanty deleted: the objects deleted within
// the retention window and still gone.
package deleted

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	short = "List objects deleted within the retention window (or since TIME)"
	long  = `Lists the objects that were deleted and are still gone: their type and name,
when they were deleted, the last revision they existed at, and the newest
revision from before their deletion began (what restore --rev takes).
Without TYPE, every type in the namespace (every type everywhere with -A),
except events, which expire by themselves. A type whose history you may not
list is skipped, and named.
`
	examples = `
  # What was deleted from the current namespace
  kubectl quanty deleted

  # ConfigMaps deleted in the last hour, in every namespace
  kubectl quanty deleted configmaps -A --since 1h

  # As JSON, for a script
  kubectl quanty deleted -n shop -o json
`
)

// Options are deleted's flags and what they resolve to.
type Options struct {
	AllNamespaces bool
	Since         string
	Output        *util.Output

	args    []string
	sinceMs int64
	cluster *util.Cluster
	clock   util.Clock
	genericiooptions.IOStreams
}

// NewOptions are deleted's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdDeleted is kubectl quanty deleted.
func NewCmdDeleted(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "deleted [TYPE] [-n NS | -A] [--since TIME] [-o table|json|yaml]",
		Short:             short,
		Long:              long,
		Example:           examples,
		ValidArgsFunction: util.CompleteTypes(f, 1),
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
	fs.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "every namespace, and cluster-scoped types")
	fs.StringVar(&o.Since, "since", "", "only deletions at or after TIME (or a duration: 1h means an hour ago)")
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
	if len(o.args) > 1 {
		return errors.New("want at most one TYPE")
	}
	if o.AllNamespaces && o.cluster.NamespaceGiven() {
		return errors.New("-A and -n exclude each other")
	}
	if o.Since != "" {
		var err error
		if o.sinceMs, err = o.clock.ParseSince("since", o.Since); err != nil {
			return err
		}
	}
	return nil
}

// Run scans the logs of the types and lists what is gone.
func (o *Options) Run(ctx context.Context) error {
	ns := ""
	if !o.AllNamespaces {
		var err error
		if ns, err = o.cluster.Namespace(ctx); err != nil {
			return err
		}
	}
	scopes, err := o.cluster.Scopes(ctx, o.args, o.AllNamespaces, ns)
	if err != nil {
		return err
	}
	scopes = o.cluster.Scan(ctx, scopes, &historypb.Request{UnixMs: o.sinceMs})
	if o.sinceMs != 0 {
		o.cluster.RescanWindow(ctx, scopes)
	}
	var rows []Row
	for _, sc := range scopes {
		if sc.Err != nil {
			if !errors.Is(sc.Err, api.ErrForbidden) {
				return sc.Err
			}
			fmt.Fprintf(o.ErrOut, "Skipped %s: %v\n", sc.Resource.Resource, sc.Err)
			continue
		}
		rows = append(rows, rowsOf(o.cluster.Keys, sc)...)
	}
	return o.print(rows)
}

// Row is one object that was deleted and is still gone.
type Row struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	// DeletedRevision and DeletedTime are the delete's.
	DeletedRevision int64  `json:"deletedRevision"`
	DeletedUnixMs   int64  `json:"deletedUnixMs"`
	DeletedTime     string `json:"deletedTime"`
	// LastRevision is the last state it had, 0 when no longer retained.
	LastRevision int64 `json:"lastRevision,omitempty"`
	// RestoreRevision is the newest state from before its deletion began.
	RestoreRevision int64 `json:"restoreRevision,omitempty"`
}

func rowsOf(tab *storagekey.Table, sc util.Scope) []Row {
	keys, logs := util.ByKey(sc.Entries)
	var rows []Row
	for _, k := range keys {
		l := logs[k]
		last := l[len(l)-1]
		if last.GetDeleted() == 0 {
			continue
		}
		obj, _ := tab.Parse([]byte(k))
		r := Row{
			Namespace: obj.Namespace, Name: obj.Name, Type: sc.Resource.TypeName(), Kind: sc.Resource.Kind, Key: k,
			DeletedRevision: last.GetRevision(), DeletedUnixMs: last.GetUnixMs(),
			LastRevision: last.GetPrevKv().GetModRevision(),
		}
		r.RestoreRevision, _, _ = objects.Restorable(l, last.GetRevision())
		rows = append(rows, r)
	}
	return rows
}

func (o *Options) print(rows []Row) error {
	slices.SortStableFunc(rows, func(a, b Row) int { return cmp.Compare(a.DeletedRevision, b.DeletedRevision) })
	for i := range rows {
		rows[i].DeletedTime = o.clock.When(rows[i].DeletedUnixMs)
	}
	if o.Output.Format != "table" {
		if rows == nil {
			rows = []Row{}
		}
		b, err := terminal.Render(map[string]any{"deleted": rows}, o.Output.Format)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(o.ErrOut, "No deleted objects found.")
		return nil
	}
	tw := terminal.NewTabular(o.Out, 3)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tDELETED\tTIME\tLAST REVISION\tRESTORE --rev")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s/%s\t%s ago\t%s\t%s\t%s\n", util.Dash(r.Namespace), r.Type, r.Name, o.clock.Age(r.DeletedUnixMs), r.DeletedTime,
			revOrDash(r.LastRevision), revOrDash(r.RestoreRevision))
	}
	return tw.Flush()
}

func revOrDash(r int64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprint(r)
}
