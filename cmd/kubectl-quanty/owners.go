package main

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

	"github.com/quantyroot/quantykube/proto/historypb"
)

// ownerRestore is a gone owner that may be restored: as it was at rev.
type ownerRestore struct {
	t   target
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
func (s *session) restoreOwners(ctx context.Context, t target, old *mvccpb.KeyValue, o restoreOpts) error {
	if old == nil {
		return nil
	}
	seen := map[types.UID]bool{decodeValue(old.Value).u().GetUID(): true}
	plan, err := s.goneOwners(ctx, t, old, seen, 0)
	if err != nil || len(plan) == 0 {
		return err
	}
	var list strings.Builder
	for _, ow := range plan {
		fmt.Fprintf(&list, "  %s at revision %d\n", ow.t, ow.rev)
	}
	switch {
	case o.withOwners:
		fmt.Fprintf(s.errOut, "With --with-owners, its gone controller owners are restored first, in this order:\n%s", list.String())
	case o.yes || o.dryRun:
		fmt.Fprintf(s.errOut, "Not restoring its gone controller owners (--with-owners restores them first):\n%s", list.String())
		return nil
	default:
		fmt.Fprintf(s.errOut, "Its gone controller owners can be restored first, in this order:\n%s", list.String())
		take, err := s.confirm("Restore them first?", false, false)
		if err != nil {
			return err
		}
		if !take {
			fmt.Fprintln(s.errOut, "Not restoring its owners.")
			return nil
		}
	}
	for _, ow := range plan {
		res, err := s.restoreTo(ctx, ow.t, ow.rev, ow.kv, o)
		if errors.Is(err, errDeclined) {
			fmt.Fprintf(s.errOut, "The owner %s is not restored.\n", ow.t)
			continue
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(s.errOut, res.line())
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
func (s *session) goneOwners(ctx context.Context, t target, kv *mvccpb.KeyValue, seen map[types.UID]bool, depth int) ([]ownerRestore, error) {
	v := decodeValue(kv.Value)
	if v.Object == nil {
		return nil, nil
	}
	var plan []ownerRestore
	for _, ref := range v.u().GetOwnerReferences() {
		ot, err := s.ownerTarget(ctx, t, ref)
		if err != nil {
			fmt.Fprintf(s.errOut, "Warning: cannot check its owner %s %s: %v\n", ref.Kind, ref.Name, err)
			continue
		}
		_, cur, err := s.state(ctx, &historypb.Request{Key: []byte(ot.key)})
		if err != nil {
			return nil, err
		}
		if cur != nil {
			if uid := decodeValue(cur.Value).u().GetUID(); uid != ref.UID && uid != "" {
				fmt.Fprintf(s.errOut, "Warning: its owner %s exists now as another object (not uid %s): the garbage collector will delete %s again.\n", ot, ref.UID, t)
			}
			continue
		}
		fmt.Fprintf(s.errOut, "Warning: its owner %s no longer exists: the garbage collector will delete %s again unless the owner comes back first.\n", ot, t)
		switch {
		case !ot.res.Namespaced:
			fmt.Fprintf(s.errOut, "Warning: %s is cluster-scoped, and kubectl quanty never restores a cluster-scoped owner: restore it yourself if it should come back.\n", ot)
			continue
		case ref.Controller == nil || !*ref.Controller:
			fmt.Fprintf(s.errOut, "Warning: %s is not its controller, and kubectl quanty restores only a controller owner: restore it yourself if it should come back.\n", ot)
			continue
		case seen[ref.UID] || depth >= maxOwnerDepth:
			continue
		}
		entries, err := s.api.log(ctx, &historypb.Request{Key: []byte(ot.key)})
		if err != nil {
			return nil, err
		}
		rev, okv, ok := restorable(entries, 1<<62)
		if !ok || decodeValue(okv.Value).u().GetUID() != ref.UID {
			fmt.Fprintf(s.errOut, "The history holds no state of the owner %s with uid %s.\n", ot, ref.UID)
			continue
		}
		seen[ref.UID] = true
		upper, err := s.goneOwners(ctx, ot, okv, seen, depth+1)
		if err != nil {
			return nil, err
		}
		plan = append(append(plan, upper...), ownerRestore{t: ot, rev: rev, kv: okv})
	}
	return plan, nil
}

// ownerTarget is the object an owner reference of t names: in t's
// namespace when its kind is namespaced.
func (s *session) ownerTarget(ctx context.Context, t target, ref metav1.OwnerReference) (target, error) {
	res, err := s.disc.byKind(ctx, ref.APIVersion, ref.Kind)
	if err != nil {
		return target{}, err
	}
	return targetIn(s.table(), res, ref.Name, t.obj.Namespace)
}
