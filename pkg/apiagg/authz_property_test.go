package apiagg_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// testingSeed is QUANTY_TEST_SEED, to rerun a failed run (0: none).
func testingSeed() uint64 {
	s, _ := strconv.ParseUint(os.Getenv("QUANTY_TEST_SEED"), 10, 64)
	return s
}

// rule is one RBAC grant: verbs on a resource in a namespace, or in every
// namespace (and at the cluster scope) when namespace is empty, as a
// RoleBinding or a ClusterRoleBinding gives it.
type rule struct {
	verbs     []string
	resource  storagekey.Resource
	namespace string
}

// rbac decides as kube-apiserver's RBAC authorizer does for the questions
// the aggregated API asks: a cluster-wide rule answers every namespace, a
// namespaced rule only its own, and a question at the cluster scope
// (Namespace empty) only a cluster-wide rule. A subresource needs a rule
// naming it ("services/status").
type rbac struct {
	mu    sync.Mutex
	rules map[string][]rule
	asked int
}

func (z *rbac) Review(_ context.Context, u user.Info, a apiagg.Access) (bool, string, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.asked++
	res := a.Resource.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	for _, r := range z.rules[u.GetName()] {
		if r.resource.Group != a.Group || r.resource.Resource != res || !slices.Contains(r.verbs, a.Verb) {
			continue
		}
		if r.namespace == "" || r.namespace == a.Namespace {
			return true, "", nil
		}
	}
	return false, "no RBAC rule allows it", nil
}

// The key space of the property test: objects of built-in resources
// (namespaced and cluster-scoped), of a custom resource, and keys that
// hold no object.
var (
	propNamespaces = []string{"a", "kube-system", "zz-team", "zz-team0"}
	propResources  = []storagekey.Resource{
		{Resource: "secrets", Namespaced: true},
		{Resource: "configmaps", Namespaced: true},
		{Resource: "services", Namespaced: true},
		{Group: "apps", Resource: "deployments", Namespaced: true},
		{Group: "example.com", Resource: "widgets", Namespaced: true},
		{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
		{Resource: "nodes"},
	}
	propRawKeys = []string{"/registry/ranges/serviceips", "/registry/masterleases/10.0.0.1", "/other/key", "compact_rev_key", "/registry/zz"}
)

// propWorld is a store filled with random changes to the key space, the
// callers' grants, and the oracle that says which keys each may see.
type propWorld struct {
	e     *env
	z     *rbac
	keys  []string // every key written
	table *storagekey.Table
	users []string
	raw   map[string]bool // users in the raw-access group
	// floors are the revisions the namespaces were last made at: what
	// their objects were before is an earlier namespace's.
	floors map[string]int64
}

func newPropWorld(t *testing.T, rng *rand.Rand) *propWorld {
	z := &rbac{rules: map[string][]rule{}}
	e := newEnvWith(t, apiagg.Config{Reviewer: z})
	w := &propWorld{e: e, z: z, table: storagekey.New(""), raw: map[string]bool{}}
	for _, r := range propResources {
		for i := range 2 {
			name := fmt.Sprintf("o%d", i)
			if !r.Namespaced {
				w.keys = append(w.keys, w.keyOf(r, "", name))
				continue
			}
			for _, ns := range propNamespaces {
				w.keys = append(w.keys, w.keyOf(r, ns, name))
			}
		}
	}
	w.keys = append(w.keys, propRawKeys...)
	for range 4 * len(w.keys) {
		if rng.IntN(40) == 0 {
			// A namespace deleted, emptied first as kube-apiserver's
			// namespace controller does, and made again under its name.
			ns := propNamespaces[rng.IntN(len(propNamespaces))]
			for _, k := range w.keys {
				if o, ok := w.table.Parse([]byte(k)); ok && o.Namespace == ns {
					e.del(k)
				}
			}
			e.del("/registry/namespaces/" + ns)
			e.put("/registry/namespaces/"+ns, "namespace "+ns+" again")
			continue
		}
		k := w.keys[rng.IntN(len(w.keys))]
		if rng.IntN(5) == 0 {
			e.del(k)
		} else {
			e.put(k, fmt.Sprintf("%s@%d", k, rng.Int()))
		}
	}
	w.floors = map[string]int64{}
	for _, ns := range propNamespaces {
		res, err := e.store.Range(context.Background(), &pb.RangeRequest{Key: []byte("/registry/namespaces/" + ns)})
		if err != nil || len(res.Kvs) != 1 {
			t.Fatalf("namespace %s: %v %v", ns, res, err)
		}
		w.floors[ns] = res.Kvs[0].CreateRevision
	}
	// Each user: a few random grants, namespaced or cluster-wide; one of
	// them in the raw-access group.
	for u := range 6 {
		name := fmt.Sprintf("user%d", u)
		w.users = append(w.users, name)
		for range 1 + rng.IntN(3) {
			r := propResources[rng.IntN(len(propResources))]
			ns := ""
			if r.Namespaced && rng.IntN(3) > 0 {
				ns = propNamespaces[rng.IntN(len(propNamespaces))]
			}
			verbs := []string{"get", "list"}
			if rng.IntN(4) == 0 {
				verbs = []string{"get"}
			}
			// What a restore writes with, with get or without it: a
			// restore must not read what get does not allow.
			switch rng.IntN(6) {
			case 0, 1:
				verbs = append(verbs, "create", "update", "delete")
			case 2:
				verbs = []string{"create", "update", "delete"}
			}
			z.rules[name] = append(z.rules[name], rule{verbs: verbs, resource: r, namespace: ns})
		}
	}
	w.raw["user5"] = true
	return w
}

// keyOf is the storage key of an object, as kube-apiserver writes it.
func (w *propWorld) keyOf(r storagekey.Resource, ns, name string) string {
	p, err := w.table.ScopePrefix(storagekey.Scope{Resource: r, Namespace: ns})
	if err != nil {
		panic(err)
	}
	return p + name
}

// may is the oracle: whether user may read the object key held at rev
// (get on it, by a rule of its namespace or a cluster-wide one; before
// its namespace was last made, by a cluster-wide rule only), or, for a
// key that holds none, whether user is in the raw-access group, which may
// read everything (system:masters, whom RBAC allows everything).
func (w *propWorld) may(user string, key []byte, rev int64) bool {
	o, ok := w.table.Parse(key)
	if !ok || w.raw[user] {
		return w.raw[user]
	}
	earlier := o.Namespace != "" && rev < w.floors[o.Namespace]
	for _, r := range w.z.rules[user] {
		if r.resource.Group == o.Group && r.resource.Resource == o.Resource.Resource && slices.Contains(r.verbs, "get") &&
			(r.namespace == "" || (r.namespace == o.Namespace && !earlier)) {
			return true
		}
	}
	return false
}

// visible are the keys user may get at rev.
func (w *propWorld) visible(user string, rev int64) []string {
	var ks []string
	for _, k := range w.keys {
		if w.may(user, []byte(k), rev) {
			ks = append(ks, k)
		}
	}
	return ks
}

// groups are the groups the front proxy names for user.
func (w *propWorld) groups(user string) []string {
	if w.raw[user] {
		return []string{apiagg.DefaultRawAccessGroup}
	}
	return []string{"system:authenticated"}
}

// randomRange is a range a client may ask for: one resource's keys in a
// namespace or everywhere, between two keys of the key space, from a key
// to the end of the key space, or a single key.
// Half of the scopes are ones the user was granted, so that most requests
// pass the authorization of the range and reach the store.
func (w *propWorld) randomRange(rng *rand.Rand, user string) (key, end []byte) {
	switch rng.IntN(6) {
	case 0, 1:
		r := propResources[rng.IntN(len(propResources))]
		sc := storagekey.Scope{Resource: r}
		if r.Namespaced && rng.IntN(2) == 0 {
			sc.Namespace = propNamespaces[rng.IntN(len(propNamespaces))]
		}
		if rules := w.z.rules[user]; len(rules) > 0 && rng.IntN(2) == 0 {
			g := rules[rng.IntN(len(rules))]
			sc = storagekey.Scope{Resource: g.resource, Namespace: g.namespace}
		}
		p, _ := w.table.ScopePrefix(sc)
		return []byte(p), []byte(p[:len(p)-1] + "0")
	case 2:
		a, b := w.keys[rng.IntN(len(w.keys))], w.keys[rng.IntN(len(w.keys))]
		if a > b {
			a, b = b, a
		}
		return []byte(a), []byte(b + "\x00")
	case 3:
		return []byte(w.keys[rng.IntN(len(w.keys))]), []byte{0}
	case 4:
		return []byte("/registry/"), []byte("/registry0")
	}
	return []byte(w.keys[rng.IntN(len(w.keys))]), nil
}

// forgedToken is a continue token no page gave: a position anywhere in
// the key space or the log, in the formats the tokens take.
func (w *propWorld) forgedToken(rng *rand.Rand, rev int64, real string) string {
	keys := append([]string{"/registry/", "/", "\x00", "/registry/secrets/", "/registry/secrets/kube-system/o0"}, w.keys...)
	k := keys[rng.IntN(len(keys))]
	switch rng.IntN(5) {
	case 0, 4:
		return strconv.FormatInt(1+rng.Int64N(rev), 10) + "/" + base64.RawURLEncoding.EncodeToString([]byte(k))
	case 1:
		return fmt.Sprintf("%d.%d", 1+rng.Int64N(rev), rng.IntN(3))
	case 2:
		// A real token's binding with another position.
		if i := strings.LastIndexAny(real, "./"); i > 0 {
			return strconv.FormatInt(1+rng.Int64N(rev), 10) + "/" + base64.RawURLEncoding.EncodeToString([]byte(k)) + real[i:]
		}
	}
	return real
}

// TestAuthorizationProperty asks the aggregated API random questions as
// users with random grants, following pages and forging continue tokens,
// and fails on any answer that holds a key the oracle says the caller may
// not see: Get of a key or a range, Log, changes, on any page.
func TestAuthorizationProperty(t *testing.T) {
	seed := rand.Uint64()
	if s := testingSeed(); s != 0 {
		seed = s
	}
	t.Logf("seed %d (QUANTY_TEST_SEED reruns it)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	w := newPropWorld(t, rng)
	rev := w.e.store.Rev()
	leaks := 0
	check := func(what, user string, keys [][]byte, revs []int64) {
		for i, k := range keys {
			if !w.may(user, k, revs[i]) {
				leaks++
				if leaks <= 10 {
					t.Errorf("%s as %s answered %q at revision %d, which %s may not see (grants %+v, namespaces made at %v)", what, user, k, revs[i], user, w.z.rules[user], w.floors)
				}
			}
		}
	}
	requests := 0
	answered := map[string]int{}
	for range 2000 {
		user := w.users[rng.IntN(len(w.users))]
		key, end := w.randomRange(rng, user)
		req := &historypb.Request{Key: key, RangeEnd: end, Limit: 1 + rng.Int64N(3)}
		endpoint := []string{"objects", "logs", "changes", "restores"}[rng.IntN(4)]
		params := ""
		switch endpoint {
		case "restores":
			// A dry run: every check a restore makes, nothing written, and
			// the value it would write answered.
			// Half of them of keys the caller may get now, so that many
			// reach the value read.
			k := w.keys[rng.IntN(len(w.keys))]
			if mine := w.visible(user, rev); len(mine) > 0 && rng.IntN(2) == 0 {
				k = mine[rng.IntN(len(mine))]
			}
			req = &historypb.Request{Key: []byte(k), Revision: 1 + rng.Int64N(rev)}
			params = "?dryRun=All"
		case "objects":
			if rng.IntN(2) == 0 {
				req.Revision = 1 + rng.Int64N(rev)
			}
			if len(req.RangeEnd) == 0 {
				req.Limit = 0
			}
		case "logs":
			req.Descending = rng.IntN(2) == 0
		case "changes":
			if len(req.RangeEnd) == 0 {
				req.RangeEnd = []byte{0}
			}
			req.Descending = rng.IntN(2) == 0
			v := url.Values{}
			if rng.IntN(2) == 0 {
				v.Set("namespace", propNamespaces[rng.IntN(len(propNamespaces))])
			}
			if rng.IntN(2) == 0 {
				r := propResources[rng.IntN(len(propResources))]
				v.Set("resource", strings.TrimSuffix(r.String(), "."))
			}
			if len(v) > 0 {
				params = "&" + v.Encode()
			}
		}
		// Pages, the token of each given back, or forged (the first page's
		// too).
		forge := rng.IntN(2) == 0
		if forge && rng.IntN(2) == 0 {
			req.Continue = w.forgedToken(rng, rev, "")
		}
		// The web page's JSON answers are the same answers, transcoded
		// after the same checks: a third of the requests ask for them.
		asJSON := rng.IntN(3) == 0
		for page := 0; page < 20; page++ {
			requests++
			what := fmt.Sprintf("%s %q..%q page %d (continue %q)%s json=%v", endpoint, req.Key, req.RangeEnd, page, req.Continue, params, asJSON)
			var code int
			var b []byte
			if endpoint == "restores" {
				code, b = w.ask("POST", base+"/restores"+params, mustMarshal(t, req), user, asJSON)
			} else {
				code, b = w.ask("GET", base+"/"+endpoint+q(req)+params, nil, user, asJSON)
			}
			if code != 200 {
				break // refused: nothing was answered
			}
			answered[endpoint]++
			var got [][]byte
			var revs []int64 // the revision each key was read at
			cont := ""
			switch {
			case asJSON:
				got, revs, cont = jsonKeys(t, what, b, req.Revision)
			case endpoint == "restores":
				var rr historypb.RestoreResponse
				if err := proto.Unmarshal(b, &rr); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if rr.Kv != nil {
					got, revs = append(got, rr.Kv.Key), append(revs, req.Revision)
				}
			case endpoint == "objects":
				var gr historypb.GetResponse
				if err := proto.Unmarshal(b, &gr); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if gr.Kv != nil {
					got, revs = append(got, gr.Kv.Key), append(revs, gr.Revision)
				}
				for _, kv := range gr.Kvs {
					got, revs = append(got, kv.Key), append(revs, gr.Revision)
				}
				cont = gr.Continue
			default:
				var lr historypb.LogResponse
				if err := proto.Unmarshal(b, &lr); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				for _, en := range lr.Entries {
					got, revs = append(got, en.Kv.GetKey()), append(revs, en.Revision)
					if en.PrevKv != nil {
						got, revs = append(got, en.PrevKv.Key), append(revs, en.PrevKv.ModRevision)
					}
				}
				cont = lr.Continue
			}
			check(what, user, got, revs)
			inRange(t, what, req, got)
			if cont == "" || endpoint == "restores" {
				break
			}
			req.Continue = cont
			if forge && rng.IntN(2) == 0 {
				req.Continue = w.forgedToken(rng, rev, cont)
			}
		}
	}
	t.Logf("%d requests (answered: %v), %d access questions, %d keys answered outside the callers' access", requests, answered, w.z.asked, leaks)
	for _, ep := range []string{"objects", "logs", "changes", "restores"} {
		if answered[ep] == 0 {
			t.Errorf("no %s request was answered: the property holds of nothing there", ep)
		}
	}
}

// ask is a request from the front proxy on behalf of user, asking for
// the web page's JSON answers when asJSON.
func (w *propWorld) ask(method, path string, body []byte, user string, asJSON bool) (int, []byte) {
	hdr := map[string]string{}
	if asJSON {
		hdr["Accept"] = apiagg.JSONType
	}
	code, b, _ := w.e.asWith(method, path, body, user, hdr, w.groups(user)...)
	return code, b
}

// jsonKeys are the keys a JSON answer holds (a log's entries and their
// previous values, a get's objects, a restore's value), with the revision
// each was read at, and its continue token. rev is the revision a restore
// was asked for.
func jsonKeys(t *testing.T, what string, b []byte, rev int64) (keys [][]byte, revs []int64, cont string) {
	t.Helper()
	type kv struct {
		Key         string `json:"key"`
		ModRevision int64  `json:"modRevision"`
	}
	var a struct {
		Entries []struct {
			Revision int64 `json:"revision"`
			KV       *kv   `json:"kv"`
			PrevKV   *kv   `json:"prevKv"`
		} `json:"entries"`
		Revision int64  `json:"revision"`
		KV       *kv    `json:"kv"`
		KVs      []*kv  `json:"kvs"`
		Continue string `json:"continue"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s: %v: %.200s", what, err, b)
	}
	for _, e := range a.Entries {
		if e.KV != nil {
			keys, revs = append(keys, []byte(e.KV.Key)), append(revs, e.Revision)
		}
		if e.PrevKV != nil {
			keys, revs = append(keys, []byte(e.PrevKV.Key)), append(revs, e.PrevKV.ModRevision)
		}
	}
	if a.Revision != 0 {
		rev = a.Revision
	}
	if a.KV != nil {
		keys, revs = append(keys, []byte(a.KV.Key)), append(revs, rev)
	}
	for _, k := range a.KVs {
		keys, revs = append(keys, []byte(k.Key)), append(revs, rev)
	}
	return keys, revs, a.Continue
}

// inRange fails when an answer holds a key outside the request's own
// range: no page, whatever its token, reads outside [key, range_end).
func inRange(t *testing.T, what string, req *historypb.Request, keys [][]byte) {
	t.Helper()
	for _, k := range keys {
		below := bytes.Compare(k, req.Key) < 0
		var above bool
		switch {
		case len(req.RangeEnd) == 0:
			above = !bytes.Equal(k, req.Key)
		case len(req.RangeEnd) == 1 && req.RangeEnd[0] == 0:
		default:
			above = bytes.Compare(k, req.RangeEnd) >= 0
		}
		if below || above {
			t.Errorf("%s answered %q, outside the range asked for", what, k)
		}
	}
}
