package apiagg

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// changesFilter is what a changes request narrows the Log to: the
// resources named (nil: every one), minus those excluded, in a namespace
// (empty: every namespace, and cluster-scoped objects).
type changesFilter struct {
	namespace string
	include   map[string]bool // resource.group, as storagekey.Resource.String
	exclude   map[string]bool
}

// parseChangesFilter reads the namespace, resource and exclude parameters.
// A resource is resource.group, or resource for the core group.
func parseChangesFilter(qs url.Values) (changesFilter, error) {
	var f changesFilter
	switch ns := qs["namespace"]; {
	case len(ns) > 1:
		return f, badRequest("give at most one namespace")
	case len(ns) == 1:
		if ns[0] == "" || strings.Contains(ns[0], "/") {
			return f, badRequest(fmt.Sprintf("namespace %q is not a namespace name", ns[0]))
		}
		f.namespace = ns[0]
	}
	set := func(param string) (map[string]bool, error) {
		if len(qs[param]) == 0 {
			return nil, nil
		}
		m := map[string]bool{}
		for _, r := range qs[param] {
			res, group, _ := strings.Cut(r, ".")
			if res == "" || strings.Contains(r, "/") || strings.HasSuffix(r, ".") {
				return nil, badRequest(fmt.Sprintf("%s %q is not resource.group (or resource, for the core group)", param, r))
			}
			m[storagekey.StoredAs(storagekey.Resource{Group: group, Resource: res}).String()] = true
		}
		return m, nil
	}
	var err error
	if f.include, err = set("resource"); err != nil {
		return f, err
	}
	f.exclude, err = set("exclude")
	return f, err
}

// maxQuestions bounds the access questions one page of changes asks:
// each is a SubjectAccessReview, which runs kube-apiserver's whole
// authorizer chain (webhooks included). A page that would need more ends
// before the change that needs it, with a continue token, and the next
// page asks on from there: the caller still gets every change it may
// list, in order, over more pages.
const maxQuestions = 100

// changesAccess decides, for one page of a changes request, which changes
// its caller sees: objects of the filter's resources and namespace that
// the caller may list, each (resource, namespace) asked once as the
// caller, a cluster-wide allow covering every namespace; keys that hold
// no object only for the raw-access groups, and only when no resource or
// namespace was named. A change older than its namespace as it exists now
// only for callers allowed in every namespace and the raw-access groups
// (nsBounds). A change it refuses is left out silently, so that no answer
// names an object its caller may not list.
type changesAccess struct {
	ctx    context.Context
	s      *Server
	u      user.Info
	f      changesFilter
	raw    bool
	memo   map[Access]bool
	floors map[string]int64 // namespace -> its current creation (nsFloor)
	err    error            // the first failure to ask; the answer is then 503
	denied int
}

func (c *changesAccess) keep(key []byte, rev int64) mvcc.Verdict {
	o, ok := c.s.keys.Parse(key)
	if !ok {
		return verdict(c.raw && c.f.include == nil && c.f.namespace == "")
	}
	name := o.Resource.String()
	if (c.f.include != nil && !c.f.include[name]) || c.f.exclude[name] {
		return mvcc.Skip
	}
	if c.f.namespace != "" && o.Namespace != c.f.namespace {
		return mvcc.Skip
	}
	res := storagekey.Resource{Group: o.Group, Resource: o.Resource.Resource, Namespaced: o.Namespaced}
	wide := Access{Verb: "list", Resource: res}
	// A namespace named: its own question answers it (a cluster-wide allow
	// allows it too). Otherwise the cluster-wide question first: one per
	// resource for a caller who may list it everywhere.
	if c.f.namespace == "" {
		switch ok, asked := c.may(wide); {
		case !asked:
			return mvcc.Stop
		case ok:
			return mvcc.Take
		}
	}
	if o.Namespace == "" {
		return mvcc.Skip
	}
	switch ok, asked := c.may(Access{Verb: "list", Resource: res, Namespace: o.Namespace}); {
	case !asked:
		return mvcc.Stop
	case !ok:
		return mvcc.Skip
	}
	if c.raw || c.s.authz.reviewer == nil || rev >= c.floor(o.Namespace) {
		return mvcc.Take
	}
	if c.f.namespace == "" {
		return mvcc.Skip // the cluster-wide question was asked: no
	}
	switch ok, asked := c.may(wide); {
	case !asked:
		return mvcc.Stop
	case ok:
		return mvcc.Take
	}
	return mvcc.Skip
}

func verdict(take bool) mvcc.Verdict {
	if take {
		return mvcc.Take
	}
	return mvcc.Skip
}

// may is the reviewer's answer for a, asked once per page (and cached
// across requests by the reviewer); asked is false when the page has
// asked its maxQuestions and this would be a new one.
func (c *changesAccess) may(a Access) (ok, asked bool) {
	if c.s.authz.reviewer == nil {
		return true, true
	}
	if ok, seen := c.memo[a]; seen {
		return ok, true
	}
	if c.err != nil {
		return false, true
	}
	if len(c.memo) >= maxQuestions {
		return false, false
	}
	ok, _, err := c.s.authz.reviewer.Review(c.ctx, c.u, a)
	if err != nil {
		c.err = err
		return false, true
	}
	if !ok {
		c.denied++
	}
	c.memo[a] = ok
	return ok, true
}

// floor is nsFloor of ns, read once per page; a failure to read it fails
// the page (503), and leaves the namespace's changes out meanwhile.
func (c *changesAccess) floor(ns string) int64 {
	if f, ok := c.floors[ns]; ok {
		return f
	}
	f, err := c.s.nsFloor(c.ctx, ns)
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return math.MaxInt64
	}
	c.floors[ns] = f
	return f
}

// serveChanges answers a Log over [key, range_end) of the changes the
// caller may list, among the resources and namespace the parameters name.
func (s *Server) serveChanges(w http.ResponseWriter, r *http.Request) {
	req, err := s.query(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	f, err := parseChangesFilter(r.URL.Query())
	if err != nil {
		writeStatus(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	s.narrowToScope(req, f)
	u := callerOf(ctx)
	c := &changesAccess{ctx: ctx, s: s, u: u, f: f, raw: s.authz.inRawGroup(ctx), memo: map[Access]bool{}, floors: map[string]int64{}}
	b := history.Bounds{Scope: scopeOf(u, "changes", f.scope()...), Keep: c.keep}
	resp, err := s.svc.LogWithin(ctx, req, b)
	if c.err != nil {
		s.log.Error("audit: could not check access", "user", c.u.GetName(), "groups", c.u.GetGroups(), "request", "changes", "err", c.err)
		writeStatus(w, unavailable("cannot check access with kube-apiserver: "+c.err.Error()))
		return
	}
	if err != nil {
		writeStatus(w, asStatus(err))
		return
	}
	if c.denied > 0 {
		s.log.Debug("changes: left out what the caller may not list", "user", c.u.GetName(), "scopes_denied", c.denied)
	}
	s.writeAnswer(w, r, resp)
}

// narrowToScope narrows req's range to the keys of the one resource the
// filter names (in its namespace), when it names one: the log is then
// filtered by key in the database, not row by row here.
func (s *Server) narrowToScope(req *historypb.Request, f changesFilter) {
	if len(f.include) != 1 || len(req.RangeEnd) == 0 {
		return
	}
	var name string
	for name = range f.include {
	}
	res, group, _ := strings.Cut(name, ".")
	sc := storagekey.Scope{Resource: storagekey.Resource{Group: group, Resource: res, Namespaced: f.namespace != ""}, Namespace: f.namespace}
	p, err := s.keys.ScopePrefix(sc)
	if err != nil {
		return // no such resource: the filter leaves everything out anyway
	}
	lo, hi := []byte(p), []byte(p[:len(p)-1]+"0") // '0' follows '/'
	if bytes.Compare(req.Key, lo) < 0 {
		req.Key = lo
	}
	if unbounded := len(req.RangeEnd) == 1 && req.RangeEnd[0] == 0; unbounded || bytes.Compare(hi, req.RangeEnd) < 0 {
		req.RangeEnd = hi
	}
	if bytes.Compare(req.RangeEnd, req.Key) <= 0 {
		// Nothing of the resource is in the range: an empty range, which
		// the store answers with an empty page.
		req.RangeEnd = req.Key
	}
}
