// Package changes is kubectl quanty changes: every change in a namespace
// or the cluster, what, when, who.
package changes

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// defaultSince is changes' window without --since: the last hour, as
// kube-apiserver keeps Events (its --event-ttl), the other place people
// look for what just happened. A longer one is a flag away, and the
// first page of a day of a busy cluster is not what a glance wants.
const defaultSince = "1h"

// watchInterval is how often changes --watch asks for new changes: often
// enough to follow a rollout as it happens, seldom enough that a watching
// terminal costs the store one small page read every two seconds.
const watchInterval = 2 * time.Second

const (
	short = "List every change in a namespace or the cluster: what, when, who"
	long  = `Lists every create, update, delete and restore in the window, newest first:
its time, revision, action, the object, its namespace (with -A), the
field manager that made it (from the object's managedFields, where they
say; empty where they do not) and the fields it changed. Without TYPE,
every type you may list, custom resources included, but Events and
Leases (heartbeats, renewed every few seconds), which are left out unless
named. Only what you may list is shown: a type or a namespace you may
not list is left out, whole.

The window is the last hour unless --since says otherwise; --since older
than QuantyKube's retention (--retain, 24h by default) is refused, naming
the oldest time it holds. -l matches the labels the object had at the
change (before it, for a delete). --watch prints the list, then each new
change as it happens, as kubectl get --watch does, until interrupted.
`
	examples = `
  # What changed in the whole cluster since 3 am
  kubectl quanty changes -A --since 2026-05-01T03:00:00Z

  # Deployments and ConfigMaps changed in shop in the last 15 minutes
  kubectl quanty changes deployments,configmaps -n shop --since 15m

  # Follow changes to the objects labelled app=web as they happen
  kubectl quanty changes -n shop -l app=web --watch
`
)

// Options are changes' flags and what they resolve to.
type Options struct {
	AllNamespaces bool
	Since, Until  string
	Selector      string
	Reverse       bool
	Limit         int
	Watch         bool
	Output        *util.Output

	args             []string
	sel              labels.Selector
	sinceMs, untilMs int64
	cluster          *util.Cluster
	clock            util.Clock
	genericiooptions.IOStreams
}

// NewOptions are changes' defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams}
}

// NewCmdChanges is kubectl quanty changes.
func NewCmdChanges(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:               "changes [TYPE[,TYPE...]] [-n NS | -A] [--since TIME] [--until TIME] [-l SELECTOR] [--reverse] [--limit N] [-w] [-o wide|json|yaml]",
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
	fs.StringVar(&o.Since, "since", defaultSince, "changes at or after TIME (or a duration: 1h means an hour ago)")
	fs.StringVar(&o.Until, "until", "", "changes before TIME (or a duration ago); default: now")
	fs.StringVarP(&o.Selector, "selector", "l", "", "only objects whose labels matched (as kubectl -l) at the change")
	fs.BoolVar(&o.Reverse, "reverse", false, "oldest first")
	fs.IntVar(&o.Limit, "limit", 0, "at most N changes (0: every change in the window)")
	fs.BoolVarP(&o.Watch, "watch", "w", false, "after the list, print each new change as it happens, until interrupted")
	o.Output = util.AddOutputFlag(cmd, "table", "wide", "json", "yaml")
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
	var err error
	if o.sel, err = util.ParseSelector(o.Selector); err != nil {
		return err
	}
	if o.Limit < 0 {
		return fmt.Errorf("--limit %d: want N >= 0 (0: every change)", o.Limit)
	}
	if o.AllNamespaces && o.cluster.NamespaceGiven() {
		return errors.New("-A and -n exclude each other")
	}
	if o.sinceMs, err = o.clock.PastTime("since", o.Since); err != nil {
		return err
	}
	o.untilMs = 0
	if o.Until != "" {
		if o.untilMs, err = o.clock.PastTime("until", o.Until); err != nil {
			return err
		}
		if o.untilMs <= o.sinceMs {
			return fmt.Errorf("--until %s is not after --since %s: the window is empty", o.Until, o.Since)
		}
	}
	if err := o.Output.Validate(); err != nil {
		return err
	}
	if o.Watch && o.Until != "" {
		return errors.New("--watch follows changes from now on: it takes no --until")
	}
	return nil
}

// Run lists the window, then, with --watch, what follows.
func (o *Options) Run(ctx context.Context) error {
	q, err := o.query(ctx)
	if err != nil {
		return err
	}
	rows, header, err := o.read(ctx, q)
	if err != nil {
		return err
	}
	p := &printer{o: o, format: o.Output.Format, all: o.AllNamespaces}
	if err := p.print(rows, true); err != nil {
		return err
	}
	if !o.Watch {
		return nil
	}
	return o.watch(ctx, q, header, p)
}

// query is one changes listing: the request and the filters the
// plugin applies itself.
type query struct {
	req    *historypb.Request
	params url.Values
	sel    labels.Selector
	limit  int
	since  string
	until  string
}

// query is the listing the flags ask for.
func (o *Options) query(ctx context.Context) (*query, error) {
	q := &query{params: url.Values{}, sel: o.sel, limit: o.Limit, since: o.Since, until: o.Until}
	prefix := strings.TrimSuffix(o.cluster.EtcdPrefix, "/") + "/"
	q.req = &historypb.Request{
		Key: []byte(prefix), RangeEnd: []byte(strings.TrimSuffix(prefix, "/") + "0"),
		UnixMs: o.sinceMs, EndUnixMs: o.untilMs, Descending: !o.Reverse,
	}
	if !o.AllNamespaces {
		ns, err := o.cluster.Namespace(ctx)
		if err != nil {
			return nil, err
		}
		q.params.Set("namespace", ns)
	}
	rs, err := o.cluster.Types(ctx, o.args)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		q.params.Add("resource", r.Resource.String())
	}
	if len(rs) == 0 {
		for _, r := range unlessNamed {
			q.params.Add("exclude", r)
		}
	}
	return q, nil
}

// unlessNamed are left out of changes unless a TYPE names them: Events,
// which expire by themselves, and Leases, the heartbeats that controllers,
// kube-apiserver and every node renew every few seconds (QuantyKube keeps
// them ten minutes for that reason). Either would outnumber, by far, every
// change a person made.
var unlessNamed = []string{"events", "events.events.k8s.io", "leases.coordination.k8s.io"}

// Row is one change, as changes prints it.
type Row struct {
	Revision     int64    `json:"revision"`
	Time         string   `json:"time"`
	UnixMs       int64    `json:"unixMs"`
	Action       string   `json:"action"`
	RestoredFrom int64    `json:"restoredFrom,omitempty"`
	Type         string   `json:"type"`
	Namespace    string   `json:"namespace,omitempty"`
	Name         string   `json:"name"`
	Key          string   `json:"key"`
	Manager      string   `json:"manager,omitempty"`
	Changes      []string `json:"changes,omitempty"`
	Note         string   `json:"note,omitempty"`
}
