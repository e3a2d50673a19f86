package apiagg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// Access is a question for kube-apiserver's authorizer: may the caller do
// Verb to the object (Name set), or to its Subresource (status), or to
// every object of the resource in Namespace (or in every namespace when it
// is empty)?
type Access struct {
	Verb string
	storagekey.Resource
	Subresource     string
	Namespace, Name string
}

func (a Access) String() string {
	what := a.Resource.String()
	if a.Subresource != "" {
		what = a.Resource.Resource + "/" + a.Subresource
		if a.Group != "" {
			what += "." + a.Group
		}
	}
	if a.Name != "" {
		what += " " + a.Name
	}
	if a.Namespace != "" {
		return fmt.Sprintf("%s %s in namespace %s", a.Verb, what, a.Namespace)
	}
	return a.Verb + " " + what
}

// Reviewer answers an access question for a user, as kube-apiserver's
// authorizer would (allowed, and why not).
type Reviewer interface {
	Review(ctx context.Context, u user.Info, a Access) (allowed bool, reason string, err error)
}

// Decisions are kept briefly, keyed by the whole identity and question: a
// restore or a paged log asks the same question several times in a row,
// and a revoked role takes effect within seconds.
const (
	allowTTL = 10 * time.Second
	denyTTL  = 5 * time.Second
)

// sarReviewer asks kube-apiserver with a SubjectAccessReview as the caller,
// through client-go's REST client for authorization.k8s.io/v1 (the typed
// clientset would bring every API type's apply configuration into the
// binary: ADR-010).
type sarReviewer struct {
	client rest.Interface
	cache  *cache.LRUExpireCache
}

type decision struct {
	allowed bool
	reason  string
}

// restConfig is the store's own credentials for kube-apiserver: the
// kubeconfig, or the service account of the pod it runs in.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, errors.New("the aggregated API asks kube-apiserver about each caller (SubjectAccessReviews, and dry runs of restores), " +
				"and needs credentials for it: --api-kubeconfig, or running in a pod with a service account " +
				"(--api-insecure-skip-object-authorization with --api-restore-check=none turns both off: then anyone kube-apiserver lets through reads every object's history, Secrets included)")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("credentials for kube-apiserver: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "quantykube-aggregated-api"
	}
	return cfg, nil
}

func newSARReviewer(cfg *rest.Config) (*sarReviewer, error) {
	scheme := runtime.NewScheme()
	if err := authzv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/apis"
	cfg.GroupVersion = &authzv1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("SubjectAccessReview client: %w", err)
	}
	return &sarReviewer{client: c, cache: cache.NewLRUExpireCache(4096)}, nil
}

func (r *sarReviewer) Review(ctx context.Context, u user.Info, a Access) (bool, string, error) {
	spec := authzv1.SubjectAccessReviewSpec{
		User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(),
		ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: a.Verb, Group: a.Group, Resource: a.Resource.Resource, Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name,
		},
	}
	if extra := u.GetExtra(); len(extra) > 0 {
		spec.Extra = map[string]authzv1.ExtraValue{}
		for k, v := range extra {
			spec.Extra[k] = v
		}
	}
	key, err := json.Marshal(spec)
	if err != nil {
		return false, "", err
	}
	if d, ok := r.cache.Get(string(key)); ok {
		return d.(decision).allowed, d.(decision).reason, nil
	}
	res := &authzv1.SubjectAccessReview{}
	err = r.client.Post().Resource("subjectaccessreviews").Body(&authzv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"}, Spec: spec}).Do(ctx).Into(res)
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	d := decision{allowed: res.Status.Allowed && !res.Status.Denied, reason: res.Status.Reason}
	ttl := denyTTL
	if d.allowed {
		ttl = allowTTL
	}
	r.cache.Add(string(key), d, ttl)
	return d.allowed, d.reason, nil
}

// authorizer decides each request from the key it names.
type authorizer struct {
	reviewer  Reviewer // nil: object authorization is off
	rawGroups []string
	keys      *storagekey.Table
	log       *slog.Logger
}

// read allows a Log or Get of [key, end): get on the object for one key,
// list on the resource in the namespace (or everywhere) for a range. It
// returns the question that allowed it (none, Verb empty, for a key that
// holds no object, which the raw-access groups read).
func (z *authorizer) read(ctx context.Context, key, end []byte) (Access, error) {
	if len(end) == 0 {
		o, ok := z.keys.Parse(key)
		if !ok {
			return Access{}, z.raw(ctx, "read", key)
		}
		a := Access{Verb: "get", Resource: o.Resource, Namespace: o.Namespace, Name: o.Name}
		return a, z.check(ctx, a)
	}
	s, ok := z.keys.RangeScope(key, end)
	if !ok {
		return Access{}, z.raw(ctx, "read", key)
	}
	a := Access{Verb: "list", Resource: s.Resource, Namespace: s.Namespace}
	return a, z.check(ctx, a)
}

// may is the reviewer's answer to a question that narrows what a request
// reads rather than refusing it: a no is not logged as a denial.
func (z *authorizer) may(ctx context.Context, a Access) (bool, error) {
	if z.reviewer == nil {
		return true, nil
	}
	ok, _, err := z.reviewer.Review(ctx, callerOf(ctx), a)
	if err != nil {
		u := callerOf(ctx)
		z.log.Error("audit: could not check access", "user", u.GetName(), "groups", u.GetGroups(), "access", a.String(), "err", err)
		return false, unavailable("cannot check access with kube-apiserver: " + err.Error())
	}
	return ok, nil
}

// write allows a restore of key from its state now (cur) to old: update
// an object that exists, create one that is brought back, delete one that
// is restored to absence.
func (z *authorizer) write(ctx context.Context, key []byte, cur, old bool) error {
	o, ok := z.keys.Parse(key)
	if !ok {
		return z.raw(ctx, "restore", key)
	}
	verb := "update"
	switch {
	case !old:
		verb = "delete"
	case !cur:
		verb = "create"
	}
	a := Access{Verb: verb, Resource: o.Resource, Namespace: o.Namespace, Name: o.Name}
	if verb == "create" {
		// RBAC cannot name an object that does not exist yet for create:
		// kube-apiserver asks about the namespace, and so do we.
		a.Name = ""
	}
	return z.check(ctx, a)
}

func (z *authorizer) check(ctx context.Context, a Access) error {
	if z.reviewer == nil {
		return nil
	}
	u := callerOf(ctx)
	ok, reason, err := z.reviewer.Review(ctx, u, a)
	if err != nil {
		z.log.Error("audit: could not check access", "user", u.GetName(), "groups", u.GetGroups(), "access", a.String(), "err", err)
		return unavailable("cannot check access with kube-apiserver: " + err.Error())
	}
	if !ok {
		z.log.Warn("audit: denied", "user", u.GetName(), "groups", u.GetGroups(), "access", a.String(), "reason", reason)
		return forbidden(u, a, reason)
	}
	return nil
}

// raw allows what no Kubernetes object stands behind to the raw-access
// groups only.
func (z *authorizer) raw(ctx context.Context, what string, key []byte) error {
	if z.inRawGroup(ctx) {
		return nil
	}
	u := callerOf(ctx)
	reason := fmt.Sprintf("%q holds no Kubernetes object (or the range reaches past one resource): to %s it, be in one of the groups %v (--api-raw-access-groups)", key, what, z.rawGroups)
	z.log.Warn("audit: denied", "user", u.GetName(), "groups", u.GetGroups(), "key", string(key), "reason", reason)
	return apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: "keys"}, string(key), errors.New(reason))
}

// inRawGroup is whether the caller is in a raw-access group.
func (z *authorizer) inRawGroup(ctx context.Context) bool {
	for _, g := range callerOf(ctx).GetGroups() {
		if slices.Contains(z.rawGroups, g) {
			return true
		}
	}
	return false
}

// forbidden is kube-apiserver's own wording for a refused request.
func forbidden(u user.Info, a Access, reason string) error {
	where := "at the cluster scope"
	if a.Namespace != "" {
		where = fmt.Sprintf("in the namespace %q", a.Namespace)
	}
	msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q %s", u.GetName(), a.Verb, a.Resource.Resource, a.Group, where)
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: a.Group, Resource: a.Resource.Resource}, a.Name,
		errors.New(msg+" (history is never wider than access to the object)"))
}
