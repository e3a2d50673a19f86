package main

// get TYPE: the objects of a type as they were at a revision or a time,
// read as a range Get of the type's storage prefix, in pages.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/proto/historypb"
)

type listOpts struct {
	all                  bool
	selector             string
	format               string // "" is the table
	managed, showSecrets bool
}

// listed is one object of the list: its state then, its key's state now.
type listed struct {
	kv  *mvccpb.KeyValue
	val value
	now string // same, changed, deleted, replaced
}

func (s *session) getList(ctx context.Context, typ string, at *point, o listOpts) error {
	sel, err := parseSelector(o.selector)
	if err != nil {
		return err
	}
	if o.all && s.kubectlOptions.namespace() != "" {
		return errors.New("-A and -n exclude each other")
	}
	res, err := s.disc.resolve(ctx, typ)
	if err != nil {
		return err
	}
	sc := scope{res: res}
	if res.Namespaced && !o.all {
		if sc.ns, err = s.namespace(ctx); err != nil {
			return err
		}
	}
	prefix, err := sc.prefix(s.table())
	if err != nil {
		return err
	}
	req, err := at.request(prefix, s.now(), true)
	if err != nil {
		return err
	}
	if req.UnixMs > s.now().UnixMilli() {
		return fmt.Errorf("--at %s is in the future: history ends now (kubectl get shows now)", at.at)
	}
	req.RangeEnd = []byte(strings.TrimSuffix(prefix, "/") + "0")
	rev, kvs, err := s.rangeAt(ctx, req)
	if errors.Is(err, errOutsideRetention) {
		return fmt.Errorf("%s: %w", pointFlag(at), err)
	}
	if err != nil {
		return err
	}
	var items []listed
	for _, kv := range kvs {
		v := decodeValue(kv.Value)
		if v.Object != nil && !selects(sel, v.Object) || v.Object == nil && sel != nil {
			continue
		}
		items = append(items, listed{kv: kv, val: v})
	}
	switch o.format {
	case "yaml", "json":
		return s.printList(items, rev, o)
	case "name":
		for _, it := range items {
			name := it.val.u().GetName()
			if name == "" {
				o, _ := s.table().Parse(it.kv.Key)
				name = o.Name
			}
			fmt.Fprintf(s.out, "%s/%s\n", res.typeName(), name)
		}
		return nil
	}
	if len(items) == 0 {
		where := "in namespace " + sc.ns
		if sc.ns == "" {
			where = "anywhere"
		}
		fmt.Fprintf(s.errOut, "No %s found %s at revision %d.\n", res.Resource.Resource, where, rev)
		return nil
	}
	if err := s.markNow(ctx, prefix, items); err != nil {
		return err
	}
	cols := s.columnsOf(ctx, res, req, o.format == "wide")
	var then time.Time
	if req.UnixMs != 0 {
		then = time.UnixMilli(req.UnixMs)
	} else {
		then = s.now()
	}
	return s.printTable(items, cols, res.Namespaced && sc.ns == "", then)
}

// pointFlag names the flag that gave the point.
func pointFlag(at *point) string {
	if at.at != "" {
		return "--at " + at.at
	}
	return fmt.Sprintf("--rev %d", at.rev)
}

// rangeAt reads every key of req's range as it was, page by page: the
// revision read (the first page's, which later pages keep) and the keys.
func (s *session) rangeAt(ctx context.Context, req *historypb.Request) (int64, []*mvccpb.KeyValue, error) {
	req = proto.CloneOf(req)
	var all []*mvccpb.KeyValue
	var rev int64
	for range maxLogPages {
		resp, err := s.api.get(ctx, req)
		if err != nil {
			return 0, nil, err
		}
		if rev == 0 {
			rev = resp.GetRevision()
		}
		all = append(all, resp.GetKvs()...)
		if resp.GetContinue() == "" {
			return rev, all, nil
		}
		req.Continue = resp.GetContinue()
	}
	return 0, nil, fmt.Errorf("the listing of %q did not end after %d pages", req.Key, maxLogPages)
}

// markNow reads the range now and says, of each item, whether its key
// still holds it: unchanged, changed since, deleted since, or another
// object (another uid) of the same name.
func (s *session) markNow(ctx context.Context, prefix string, items []listed) error {
	_, kvs, err := s.rangeAt(ctx, &historypb.Request{Key: []byte(prefix), RangeEnd: []byte(strings.TrimSuffix(prefix, "/") + "0")})
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
		case decodeValue(cur.Value).u().GetUID() != it.val.u().GetUID():
			it.now = "replaced"
		default:
			it.now = "changed"
		}
	}
	return nil
}

// printList prints the items as kubectl get -o yaml prints a list: a v1
// List, each item with its revision as resourceVersion.
func (s *session) printList(items []listed, rev int64, o listOpts) error {
	list := map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": fmt.Sprint(rev)}}
	objs := []any{}
	for _, it := range items {
		if it.val.Object == nil {
			fmt.Fprintf(s.errOut, "Warning: %s at revision %d: %s\n", it.kv.Key, it.kv.ModRevision, it.val.describe())
			continue
		}
		obj := it.val.shown(it.kv.ModRevision, o.managed)
		if !o.showSecrets {
			maskSecrets(obj, nil)
		}
		objs = append(objs, obj)
	}
	list["items"] = objs
	b, err := render(list, o.format)
	if err != nil {
		return err
	}
	_, err = s.out.Write(b)
	return err
}

func (s *session) printTable(items []listed, cols []column, withNS bool, then time.Time) error {
	tw := newTabular(s.out, 3)
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
		o, _ := s.table().Parse(it.kv.Key)
		var cells []string
		if withNS {
			cells = append(cells, o.Namespace)
		}
		cells = append(cells, o.Name)
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
