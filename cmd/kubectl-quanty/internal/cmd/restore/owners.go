package restore

// An object's owners (its ownerReferences) are other objects, managed by
// someone else: restore follows nobody's ownerReferences on its own. It
// warns when an owner of the state it restores is gone (the garbage
// collector would delete the restored object again), and restores an
// owner only when asked: --with-owners, or yes to the question, which
// --yes and --dry-run do not answer, and whose default is no. Even then,
// only an owner that is the object's controller (ownerReference
// controller: true), the one object whose deletion the garbage collector
// follows it by, and in its namespace: a cluster-scoped owner (a Node, a
// ClusterRole, a Namespace) is shared beyond the object restored, and is
// never restored with it. Kubernetes lets a namespaced object be owned
// only in its own namespace, so a namespaced owner is looked up there.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// ownerRestore is a gone owner that may be restored: as it was at rev.
type ownerRestore struct {
	t   util.Target
	rev int64
	kv  *mvccpb.KeyValue
}

// maxOwnerDepth bounds the chain of controllers followed up from the
// object (a Pod's ReplicaSet, then its Deployment, is 2).
const maxOwnerDepth = 8

// restoreOwners restores, before the object, the gone owners of the
// state to restore (old) that may be restored (goneOwners), as o says:
// all of them with --with-owners, after listing them; none with --yes or
// --dry-run alone; else those the user says yes to, no by default.
func (o *Options) restoreOwners(ctx context.Context, t util.Target, old *mvccpb.KeyValue) error {
	if old == nil {
		return nil
	}
	seen := map[types.UID]bool{objects.Decode(old.Value).U().GetUID(): true}
	plan, err := o.goneOwners(ctx, t, old, seen, 0)
	if err != nil || len(plan) == 0 {
		return err
	}
	var list strings.Builder
	for _, ow := range plan {
		fmt.Fprintf(&list, "  %s at revision %d\n", ow.t, ow.rev)
	}
	switch {
	case o.WithOwners:
		fmt.Fprintf(o.ErrOut, "With --with-owners, its gone controller owners are restored first, in this order:\n%s", list.String())
	case o.Yes || o.DryRun:
		fmt.Fprintf(o.ErrOut, "Not restoring its gone controller owners (--with-owners restores them first):\n%s", list.String())
		return nil
	default:
		fmt.Fprintf(o.ErrOut, "Its gone controller owners can be restored first, in this order:\n%s", list.String())
		take, err := o.prompt.Confirm("Restore them first?", false, false)
		if err != nil {
			return err
		}
		if !take {
			fmt.Fprintln(o.ErrOut, "Not restoring its owners.")
			return nil
		}
	}
	for _, ow := range plan {
		res, err := o.restoreTo(ctx, ow.t, ow.rev, ow.kv)
		if errors.Is(err, errDeclined) {
			fmt.Fprintf(o.ErrOut, "The owner %s is not restored.\n", ow.t)
			continue
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(o.ErrOut, res.Line())
	}
	return nil
}

// goneOwners checks the owners of the object in kv (t's state to
// restore): it warns of each one that is gone, or there as another
// object (another uid), and of why a gone one is not restored with it.
// It returns those that may be, topmost first: each gone owner that is
// the object's controller, namespaced, and in the history with the uid
// the reference names, after its own gone controller, found the same
// way. seen holds the uids already met, so that a cycle ends.
func (o *Options) goneOwners(ctx context.Context, t util.Target, kv *mvccpb.KeyValue, seen map[types.UID]bool, depth int) ([]ownerRestore, error) {
	v := objects.Decode(kv.Value)
	if v.Object == nil {
		return nil, nil
	}
	var plan []ownerRestore
	for _, ref := range v.U().GetOwnerReferences() {
		ot, err := o.ownerTarget(ctx, t, ref)
		if err != nil {
			fmt.Fprintf(o.ErrOut, "Warning: cannot check its owner %s %s: %v\n", ref.Kind, ref.Name, err)
			continue
		}
		_, cur, err := o.cluster.History.State(ctx, &historypb.Request{Key: []byte(ot.Key)})
		if err != nil {
			return nil, err
		}
		if cur != nil {
			if uid := objects.Decode(cur.Value).U().GetUID(); uid != ref.UID && uid != "" {
				fmt.Fprintf(o.ErrOut, "Warning: its owner %s exists now as another object (not uid %s): the garbage collector will delete %s again.\n", ot, ref.UID, t)
			}
			continue
		}
		fmt.Fprintf(o.ErrOut, "Warning: its owner %s no longer exists: the garbage collector will delete %s again unless the owner comes back first.\n", ot, t)
		switch {
		case !ot.Resource.Namespaced:
			fmt.Fprintf(o.ErrOut, "Warning: %s is cluster-scoped, and kubectl quanty never restores a cluster-scoped owner: restore it yourself if it should come back.\n", ot)
			continue
		case ref.Controller == nil || !*ref.Controller:
			fmt.Fprintf(o.ErrOut, "Warning: %s is not its controller, and kubectl quanty restores only a controller owner: restore it yourself if it should come back.\n", ot)
			continue
		case seen[ref.UID] || depth >= maxOwnerDepth:
			continue
		}
		entries, err := o.cluster.History.Log(ctx, &historypb.Request{Key: []byte(ot.Key)})
		if err != nil {
			return nil, err
		}
		rev, okv, ok := objects.Restorable(entries, 1<<62)
		if !ok || objects.Decode(okv.Value).U().GetUID() != ref.UID {
			fmt.Fprintf(o.ErrOut, "The history holds no state of the owner %s with uid %s.\n", ot, ref.UID)
			continue
		}
		seen[ref.UID] = true
		upper, err := o.goneOwners(ctx, ot, okv, seen, depth+1)
		if err != nil {
			return nil, err
		}
		plan = append(append(plan, upper...), ownerRestore{t: ot, rev: rev, kv: okv})
	}
	return plan, nil
}

// ownerTarget is the object an owner reference of t names: in t's
// namespace when its kind is namespaced.
func (o *Options) ownerTarget(ctx context.Context, t util.Target, ref metav1.OwnerReference) (util.Target, error) {
	res, err := o.cluster.Discovery.ByKind(ctx, ref.APIVersion, ref.Kind)
	if err != nil {
		return util.Target{}, err
	}
	return util.TargetIn(o.cluster.Keys, res, ref.Name, t.Object.Namespace)
}
