package undelete

import (
	"context"
	"errors"
	"fmt"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// plan is what undelete writes.
type plan struct {
	ns        util.Candidate // the namespace
	at        int64          // the revision restored to
	deletedAt int64          // the namespace's delete
	restore   []util.Candidate
	skipped   []util.Skipped
	// unread are the resources whose history could not be read.
	unread []string
	// orphans warns of objects whose owners are not coming back.
	orphans []string
}

// plan finds the namespace's last deletion and what went with it.
func (o *Options) plan(ctx context.Context) (*plan, error) {
	name := o.name
	nsRes, err := o.cluster.Discovery.Resolve(ctx, "namespaces")
	if err != nil {
		return nil, err
	}
	t, err := util.TargetIn(o.cluster.Keys, nsRes, name, "")
	if err != nil {
		return nil, err
	}
	entries, err := o.cluster.History.Log(ctx, &historypb.Request{Key: []byte(t.Key)})
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("no history of namespace %s: it was never there, or its deletion is older than the retention window", name)
	}
	last := entries[len(entries)-1]
	if last.GetDeleted() == 0 {
		phase := "it exists"
		if objects.BeingDeleted(last.GetKv()) != "" {
			phase = "it is still being deleted: wait until it is gone"
		}
		return nil, fmt.Errorf("namespace %s is not deleted: %s", name, phase)
	}
	// The restore point: by default the revision just before the first
	// change that marked the namespace as being deleted.
	rev, kv, ok := objects.Restorable(entries, last.GetRevision())
	if !ok {
		return nil, fmt.Errorf("the history holds no state of namespace %s from before its deletion began", name)
	}
	point := last.GetRevision() - 1
	for _, e := range entries {
		if e.GetRevision() > rev && e.GetDeleted() == 0 && objects.BeingDeleted(e.GetKv()) != "" {
			point = e.GetRevision() - 1
			break
		}
	}
	if o.At != "" {
		r, k, err := o.cluster.History.State(ctx, &historypb.Request{Key: []byte(t.Key), UnixMs: o.atMs})
		if err != nil {
			return nil, err
		}
		if r > point {
			return nil, fmt.Errorf("--at %s is revision %d, after the deletion of namespace %s began (revision %d)", o.At, r, name, point+1)
		}
		if k == nil {
			return nil, fmt.Errorf("namespace %s did not exist at --at %s (revision %d)", name, o.At, r)
		}
		point, kv = r, k
	}
	p := &plan{ns: util.Candidate{Resource: nsRes, Key: t.Key, Object: t.Object, KV: kv}, at: point, deletedAt: last.GetRevision()}
	return p, o.collect(ctx, p)
}

// collect finds the objects of the namespace that existed at the restore
// point and are gone now.
func (o *Options) collect(ctx context.Context, p *plan) error {
	scopes, err := o.cluster.Scopes(ctx, nil, false, o.name)
	if err != nil {
		return err
	}
	var cands []util.Candidate
	for _, sc := range o.cluster.Scan(ctx, scopes, &historypb.Request{Revision: p.at + 1}) {
		if sc.Err != nil {
			// A resource kept for less than the time since the restore
			// point (leases, by default) cannot be restored as it was;
			// the rest can.
			if !errors.Is(sc.Err, api.ErrForbidden) && !errors.Is(sc.Err, api.ErrOutsideRetention) {
				return sc.Err
			}
			p.unread = append(p.unread, fmt.Sprintf("%s: %v", sc.Resource.Resource, sc.Err))
			continue
		}
		keys, logs := util.ByKey(sc.Entries)
		for _, k := range keys {
			l := logs[k]
			// Gone now, and existed at the restore point: the state then is
			// the one before its first change after it.
			if l[len(l)-1].GetDeleted() == 0 || l[0].GetPrevKv() == nil {
				continue
			}
			obj, _ := o.cluster.Keys.Parse([]byte(k))
			cands = append(cands, util.Candidate{Resource: sc.Resource, Key: k, Object: obj, KV: l[0].GetPrevKv()})
		}
	}
	p.restore, p.skipped = util.Order(cands)
	uids := map[string]bool{string(p.ns.Value().U().GetUID()): true}
	for _, c := range p.restore {
		uids[string(c.Value().U().GetUID())] = true
	}
	for _, c := range p.restore {
		for _, ref := range c.Value().U().GetOwnerReferences() {
			if !uids[string(ref.UID)] {
				p.orphans = append(p.orphans, fmt.Sprintf("%s: its owner %s/%s is not restored with it; if it is gone, the garbage collector deletes %s again", c, ref.Kind, ref.Name, c))
			}
		}
	}
	return nil
}
