package apiagg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// scopeOf is what a continue token of one endpoint is bound to beside the
// request (history.Bounds.Scope): the endpoint, the caller, and what else
// decides the pages (extra: the changes filter). A token is refused for
// another caller, so that one handed on never reads as someone else.
func scopeOf(u user.Info, endpoint string, extra ...string) string {
	parts := append([]string{endpoint, u.GetName(), u.GetUID()}, extra...)
	return strings.Join(parts, "\x00")
}

// A namespace's name outlives the namespace. Access is decided from
// today's RBAC, and a namespace-scoped grant (a RoleBinding) is tied to a
// name, not to the namespace that held it: whoever is given a namespace
// named as a deleted one would otherwise read the retained history of
// the objects of the one before, Secrets included. History of a
// namespaced object older than the creation of its namespace as it
// exists now is therefore shown only to callers allowed the same access
// in every namespace (a ClusterRoleBinding, which no namespace's owner
// hands out) and to the raw-access groups (ADR-036).

// nsFloor is the revision the namespace ns was created at, as it exists
// now: what of its objects' history is older belongs to an earlier
// namespace of that name. A namespace that does not exist now has no
// current incarnation: its floor is past the store's revision.
func (s *Server) nsFloor(ctx context.Context, ns string) (int64, error) {
	p, err := s.keys.ScopePrefix(storagekey.Scope{Resource: storagekey.Resource{Resource: "namespaces"}})
	if err != nil {
		return 0, err
	}
	kv, rev, err := s.svc.Current(ctx, []byte(p+ns))
	switch {
	case err != nil:
		return 0, fmt.Errorf("reading the namespace %s: %w", ns, err)
	case kv == nil:
		return rev + 1, nil
	}
	return kv.CreateRevision, nil
}

// nsBounds narrows a read or restore that a (namespaced) question allowed
// to the current incarnation of a's namespace, unless the caller is in a
// raw-access group or may do the same in every namespace: a Log starts no
// earlier than the namespace's creation, and a Get or Restore before it is
// refused. The namespace is read, and the cluster-wide question asked,
// only for a request that reaches before its creation.
func (s *Server) nsBounds(ctx context.Context, a Access, b *history.Bounds) {
	if s.authz.reviewer == nil || !a.Namespaced || a.Namespace == "" || s.authz.inRawGroup(ctx) {
		return
	}
	var floor int64
	var wide *bool
	// older reports whether what starts at rev reaches before the
	// namespace's creation for this caller (floor then set).
	older := func(rev int64) (bool, error) {
		if floor == 0 {
			f, err := s.nsFloor(ctx, a.Namespace)
			if err != nil {
				return false, unavailable(err.Error())
			}
			floor = f
		}
		if rev >= floor {
			return false, nil
		}
		if wide == nil {
			ok, err := s.authz.may(ctx, Access{Verb: a.Verb, Resource: a.Resource})
			if err != nil {
				return false, err
			}
			wide = &ok
		}
		return !*wide, nil
	}
	b.LogFrom = func(from int64) (int64, error) {
		if o, err := older(from); err != nil || !o {
			return from, err
		}
		return floor, nil
	}
	b.CheckRev = func(rev int64) error {
		if o, err := older(rev); err != nil || !o {
			return err
		}
		return s.authz.olderNamespace(ctx, a, floor, rev)
	}
}

// olderNamespace refuses a read of a's namespace's history before floor,
// its current creation.
func (z *authorizer) olderNamespace(ctx context.Context, a Access, floor, rev int64) error {
	u := callerOf(ctx)
	wide := Access{Verb: a.Verb, Resource: a.Resource}
	why := fmt.Sprintf("revision %d is older than the namespace %q as it exists now (created at revision %d): what it held before belongs to an earlier namespace of that name, "+
		"and only callers who may %s, or the groups %v (--api-raw-access-groups), read it", rev, a.Namespace, floor, wide, z.rawGroups)
	z.log.Warn("audit: denied", "user", u.GetName(), "groups", u.GetGroups(), "access", a.String(), "reason", why)
	return apierrors.NewForbidden(schema.GroupResource{Group: a.Group, Resource: a.Resource.Resource}, a.Name, errors.New(why))
}

// filterScope is the changes filter as part of a token's scope.
func (f changesFilter) scope() []string {
	set := func(m map[string]bool) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return strings.Join(keys, ",")
	}
	return []string{f.namespace, set(f.include), set(f.exclude)}
}
