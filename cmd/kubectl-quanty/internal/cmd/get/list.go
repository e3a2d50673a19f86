package get

// get TYPE: the objects of a type as they were at a revision or a time,
// read as a range Get of the type's storage prefix, in pages.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// listed is one object of the list: its state then, its key's state now.
type listed struct {
	kv  *mvccpb.KeyValue
	val objects.Value
	now string // same, changed, deleted, replaced
}

func (o *Options) runList(ctx context.Context) error {
	res, err := o.cluster.Discovery.Resolve(ctx, o.args[0])
	if err != nil {
		return err
	}
	sc := util.Scope{Resource: res}
	if res.Namespaced && !o.AllNamespaces {
		if sc.Namespace, err = o.cluster.Namespace(ctx); err != nil {
			return err
		}
	}
	prefix, err := sc.Prefix(o.cluster.Keys)
	if err != nil {
		return err
	}
	req, err := o.Point.Request(prefix, o.clock)
	if err != nil {
		return err
	}
	if req.UnixMs > o.clock.Now().UnixMilli() {
		return fmt.Errorf("--at %s is in the future: history ends now (kubectl get shows now)", o.Point.At)
	}
	req.RangeEnd = []byte(strings.TrimSuffix(prefix, "/") + "0")
	rev, kvs, err := o.cluster.History.Range(ctx, req)
	if errors.Is(err, api.ErrOutsideRetention) {
		return fmt.Errorf("%s: %w", o.Point.Flag(), err)
	}
	if err != nil {
		return err
	}
	var items []listed
	for _, kv := range kvs {
		v := objects.Decode(kv.Value)
		if v.Object != nil && !util.Selects(o.sel, v.Object) || v.Object == nil && o.sel != nil {
			continue
		}
		items = append(items, listed{kv: kv, val: v})
	}
	switch o.Output.Format {
	case "yaml", "json":
		return o.printList(items, rev)
	case "name":
		for _, it := range items {
			name := it.val.U().GetName()
			if name == "" {
				obj, _ := o.cluster.Keys.Parse(it.kv.Key)
				name = obj.Name
			}
			fmt.Fprintf(o.Out, "%s/%s\n", res.TypeName(), name)
		}
		return nil
	}
	if len(items) == 0 {
		where := "in namespace " + sc.Namespace
		if sc.Namespace == "" {
			where = "anywhere"
		}
		fmt.Fprintf(o.ErrOut, "No %s found %s at revision %d.\n", res.Resource.Resource, where, rev)
		return nil
	}
	if err := o.markNow(ctx, prefix, items); err != nil {
		return err
	}
	cols := o.columnsOf(ctx, res, req, o.Output.Format == "wide")
	var then time.Time
	if req.UnixMs != 0 {
		then = time.UnixMilli(req.UnixMs)
	} else {
		then = o.clock.Now()
	}
	return o.printTable(items, cols, res.Namespaced && sc.Namespace == "", then)
}

// markNow reads the range now and says, of each item, whether its key
// still holds it: unchanged, changed since, deleted since, or another
// object (another uid) of the same name.
func (o *Options) markNow(ctx context.Context, prefix string, items []listed) error {
	_, kvs, err := o.cluster.History.Range(ctx, &historypb.Request{Key: []byte(prefix), RangeEnd: []byte(strings.TrimSuffix(prefix, "/") + "0")})
	if err != nil {
		return err
	}
	now := map[string]*mvccpb.KeyValue{}
	for _, kv := range kvs {
		now[string(kv.Key)] = kv
	}
	for i := range items {
		it := &items[i]
		cur := now[string(it.kv.Key)]
		switch {
		case cur == nil:
			it.now = "deleted"
		case cur.ModRevision == it.kv.ModRevision:
			it.now = "same"
		case objects.Decode(cur.Value).U().GetUID() != it.val.U().GetUID():
			it.now = "replaced"
		default:
			it.now = "changed"
		}
	}
	return nil
}

// printList prints the items as kubectl get -o yaml prints a list: a v1
// List, each item with its revision as resourceVersion.
func (o *Options) printList(items []listed, rev int64) error {
	list := map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": fmt.Sprint(rev)}}
	objs := []any{}
	for _, it := range items {
		if it.val.Object == nil {
			fmt.Fprintf(o.ErrOut, "Warning: %s at revision %d: %s\n", it.kv.Key, it.kv.ModRevision, it.val.Describe())
			continue
		}
		obj := it.val.Shown(it.kv.ModRevision, o.ShowManagedFields)
		if !o.ShowSecrets {
			objects.MaskSecrets(obj, nil)
		}
		objs = append(objs, obj)
	}
	list["items"] = objs
	b, err := terminal.Render(list, o.Output.Format)
	if err != nil {
		return err
	}
	_, err = o.Out.Write(b)
	return err
}

func (o *Options) printTable(items []listed, cols []column, withNS bool, then time.Time) error {
	tw := terminal.NewTabular(o.Out, 3)
	var head []string
	if withNS {
		head = append(head, "NAMESPACE")
	}
	head = append(head, "NAME")
	for _, c := range cols {
		head = append(head, c.name)
	}
	fmt.Fprintln(tw, strings.Join(append(head, "NOW"), "\t"))
	for _, it := range items {
		obj, _ := o.cluster.Keys.Parse(it.kv.Key)
		var cells []string
		if withNS {
			cells = append(cells, obj.Namespace)
		}
		cells = append(cells, obj.Name)
		for _, c := range cols {
			v := "<unknown>"
			if it.val.Object != nil {
				v = c.value(it.val.Object, then)
			} else if c.name == cols[0].name {
				v = "<" + it.val.Format + ">"
			}
			cells = append(cells, v)
		}
		fmt.Fprintln(tw, strings.Join(append(cells, it.now), "\t"))
	}
	return tw.Flush()
}
