package revert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// item is one object to put back: its state then (nil: it did not exist)
// and now (nil: it does not).
type item struct {
	util.Candidate       // the state then, or now when created since
	rev            int64 // a revision whose state of the key is then's
	// then and now are its states; nil when absent.
	then, now *mvccpb.KeyValue
	nowRev    int64  // its mod_revision now, 0 when absent: the write's condition
	action    string // restore, re-create, delete
	changes   []string
}

// plan is what revert writes, and what it leaves.
type plan struct {
	ns      string
	point   int64 // the revision reverted to
	label   string
	items   []item
	skipped []util.Skipped
	unread  []string
}

// plan reads every change in the namespace after the point and decides,
// per object, what puts it back.
func (o *Options) plan(ctx context.Context) (*plan, error) {
	ns, err := o.cluster.Namespace(ctx)
	if err != nil {
		return nil, err
	}
	from := &historypb.Request{}
	p := &plan{ns: ns}
	if o.ToRev > 0 {
		from.Revision, p.point, p.label = o.ToRev+1, o.ToRev, fmt.Sprintf("revision %d", o.ToRev)
	} else {
		from.UnixMs, p.label = o.sinceMs, o.Since
	}
	// The point itself, read first: a point outside the retention window
	// (or a revision not yet written) is the whole command's error, named
	// as the flag that gave it.
	nsRes, err := o.cluster.Discovery.Resolve(ctx, "namespaces")
	if err != nil {
		return nil, err
	}
	nsTarget, err := util.TargetIn(o.cluster.Keys, nsRes, ns, "")
	if err != nil {
		return nil, err
	}
	at := &historypb.Request{Key: []byte(nsTarget.Key), Revision: p.point, UnixMs: from.UnixMs}
	if p.point, _, err = o.cluster.History.State(ctx, at); err != nil {
		if errors.Is(err, api.ErrOutsideRetention) {
			return nil, fmt.Errorf("%s: the point to go back to is %w", o.pointFlag(), err)
		}
		return nil, err
	}
	// The log from the revision after the point, not from the time: the
	// states written back are those at the point, exactly.
	from = &historypb.Request{Revision: p.point + 1}
	rs, err := o.cluster.Types(ctx, o.args)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		all, err := o.cluster.Discovery.All(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range all {
			if r.Namespaced && !util.Expiring(r) {
				rs = append(rs, r)
			}
		}
	}
	for _, r := range rs {
		if !r.Namespaced {
			return nil, fmt.Errorf("%s is not namespaced: revert undoes what changed in one namespace", r.Resource)
		}
	}
	var cands []item
	for _, sc := range o.cluster.Scan(ctx, o.cluster.ScopesOf(rs, ns), from) {
		if sc.Err != nil {
			// A resource kept for less than the rest (leases) cannot be
			// read back to the point, and one you may not list is not
			// yours to revert; the rest can be.
			if !errors.Is(sc.Err, api.ErrForbidden) && !errors.Is(sc.Err, api.ErrOutsideRetention) {
				return nil, sc.Err
			}
			p.unread = append(p.unread, fmt.Sprintf("%s: %v", sc.Resource.Resource, sc.Err))
			continue
		}
		keys, logs := util.ByKey(sc.Entries)
		for _, k := range keys {
			if it, ok := o.itemOf(sc.Resource, k, logs[k], p.point); ok {
				cands = append(cands, it)
			}
		}
	}
	o.split(ctx, p, cands)
	return p, nil
}

// pointFlag names the flag that gave the point.
func (o *Options) pointFlag() string {
	if o.Since != "" {
		return "--since " + o.Since
	}
	return fmt.Sprintf("--to-rev %d", o.ToRev)
}

// itemOf is what puts key back, from its log after the point; false
// when nothing does (it is as it was, or was created and deleted since),
// or the selector leaves it out.
func (o *Options) itemOf(res discovery.Resource, key string, l []*historypb.LogEntry, point int64) (item, bool) {
	first, last := l[0], l[len(l)-1]
	obj, _ := o.cluster.Keys.Parse([]byte(key))
	it := item{Candidate: util.Candidate{Resource: res, Key: key, Object: obj}, rev: point}
	thenKV := first.GetPrevKv()
	if thenKV == nil && first.GetKv().GetVersion() != 1 {
		// Its state then is no longer retained (the window moved past it
		// while the log was read): nothing safe to write back.
		return it, false
	}
	var nowKV = last.GetKv()
	if last.GetDeleted() != 0 {
		nowKV = nil
	} else {
		it.nowRev = last.GetRevision()
	}
	switch {
	case thenKV == nil && nowKV == nil:
		return it, false
	case thenKV != nil && nowKV != nil && string(thenKV.Value) == string(nowKV.Value):
		return it, false
	case thenKV == nil:
		it.action, it.KV = "delete", nowKV
	case nowKV == nil:
		it.action, it.KV = "re-create", thenKV
	default:
		it.action, it.KV = "restore", thenKV
	}
	it.then, it.now = thenKV, nowKV
	if !util.Selects(o.sel, it.Value().Object) {
		return it, false
	}
	if it.then != nil && it.now != nil {
		it.changes, _ = objects.ChangesOf(nowKV, thenKV)
	}
	return it, true
}

// split orders the plan's items, and sets aside those a controller makes
// again (util.Candidate.SkipReason, as undelete): writes of what others
// refer to first (objects.Rank), deletes last, workloads before what they
// refer to.
func (o *Options) split(ctx context.Context, p *plan, cands []item) {
	services := map[string]bool{}
	for _, it := range cands {
		if it.Resource.String() != "endpoints" {
			continue
		}
		// An Endpoints is the endpoints controller's where its Service
		// exists now or is being put back.
		services[it.Object.Name] = o.serviceExists(ctx, p.ns, it.Object.Name, cands)
	}
	for _, it := range cands {
		if why := it.SkipReason(services); why != "" {
			p.skipped = append(p.skipped, util.Skipped{Candidate: it.Candidate, Reason: why})
			continue
		}
		p.items = append(p.items, it)
	}
	slices.SortStableFunc(p.skipped, func(a, b util.Skipped) int {
		return cmp.Or(cmp.Compare(a.Resource.String(), b.Resource.String()), cmp.Compare(a.Object.Name, b.Object.Name))
	})
	step := func(it item) int {
		if it.action == "delete" {
			return 100 - objects.Rank(it.Resource.Resource)
		}
		return objects.Rank(it.Resource.Resource)
	}
	slices.SortStableFunc(p.items, func(a, b item) int {
		return cmp.Or(cmp.Compare(step(a), step(b)), cmp.Compare(a.Resource.String(), b.Resource.String()), cmp.Compare(a.Object.Name, b.Object.Name))
	})
}

// serviceExists reports whether Service name is in the namespace now, or
// comes back with the revert.
func (o *Options) serviceExists(ctx context.Context, ns, name string, cands []item) bool {
	for _, it := range cands {
		if it.Resource.String() == "services" && it.Object.Name == name {
			return it.then != nil
		}
	}
	res, err := o.cluster.Discovery.Resolve(ctx, "services")
	if err != nil {
		return false
	}
	t, err := util.TargetIn(o.cluster.Keys, res, name, ns)
	if err != nil {
		return false
	}
	_, kv, err := o.cluster.History.State(ctx, &historypb.Request{Key: []byte(t.Key)})
	return err == nil && kv != nil
}
