package apiagg_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// changesEnv is a store with changes to objects of several resources and
// namespaces, a Secret among them, and a key that holds no object.
func changesEnv(t *testing.T) *env {
	e := newEnv(t)
	for i := range 3 {
		e.put("/registry/configmaps/a/c1", fmt.Sprint("c1 ", i))
		e.put("/registry/secrets/a/s1", fmt.Sprint("secret ", i))
		e.put("/registry/configmaps/b/c3", fmt.Sprint("c3 ", i))
		e.put("/registry/deployments/a/d1", fmt.Sprint("d1 ", i))
		e.put("/registry/example.com/widgets/a/w1", fmt.Sprint("w1 ", i))
		e.put("/registry/ranges/serviceips", fmt.Sprint("bitmap ", i))
		e.put("/registry/configmaps/a/c2", fmt.Sprint("c2 ", i))
	}
	e.del("/registry/configmaps/a/c2")
	e.put("/registry/namespaces/a", "ns")
	e.grants.allow["carol"] = []string{"list configmaps in namespace a"}
	e.grants.allow["viewer"] = []string{"list configmaps", "list deployments.apps", "list widgets.example.com", "list namespaces"}
	e.grants.allow["admin"] = []string{"list configmaps", "list secrets", "list deployments.apps", "list widgets.example.com", "list namespaces"}
	return e
}

// changes pages a changes request through as user, limit entries a page,
// from the env's start on (after its namespaces were made), and returns
// the keys of every entry, newest first, and the pages' bodies.
func (e *env) changes(params string, limit int64, user string, groups ...string) ([]string, [][]byte) {
	e.t.Helper()
	req := &historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Revision: e.start + 1, Descending: true, Limit: limit}
	var keys []string
	var bodies [][]byte
	for range 100 {
		code, b, _ := e.as(e.proxy, "GET", base+"/changes"+q(req)+params, nil, user, groups...)
		if code != 200 {
			e.t.Fatalf("changes%s as %s: %d %s", params, user, code, b)
		}
		bodies = append(bodies, b)
		var lr historypb.LogResponse
		if err := proto.Unmarshal(b, &lr); err != nil {
			e.t.Fatal(err)
		}
		for _, en := range lr.Entries {
			keys = append(keys, string(en.Kv.Key))
		}
		if lr.Continue == "" {
			return keys, bodies
		}
		req.Continue = lr.Continue
	}
	e.t.Fatal("more than 100 pages")
	return nil, nil
}

// distinct is the keys once each, sorted.
func distinct(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

// A changes request lists, across resources and namespaces, exactly the
// changes its caller may list: a user allowed list on configmaps in one
// namespace sees those and nothing else, a Secret's key never reaches a
// user without list on secrets, keys that hold no object only the raw
// groups; pages of one entry list what one page does.
func TestChangesListWhatTheCallerMayList(t *testing.T) {
	e := changesEnv(t)
	for _, tc := range []struct {
		user   string
		groups []string
		params string
		want   []string
		n      int // entries
	}{
		{"carol", nil, "", []string{"/registry/configmaps/a/c1", "/registry/configmaps/a/c2"}, 7},
		{"carol", nil, "&namespace=a&resource=configmaps", []string{"/registry/configmaps/a/c1", "/registry/configmaps/a/c2"}, 7},
		{"carol", nil, "&namespace=b", nil, 0},
		{"viewer", nil, "", []string{"/registry/configmaps/a/c1", "/registry/configmaps/a/c2", "/registry/configmaps/b/c3",
			"/registry/deployments/a/d1", "/registry/example.com/widgets/a/w1", "/registry/namespaces/a"}, 17},
		{"viewer", nil, "&resource=secrets", nil, 0},
		{"viewer", nil, "&resource=deployments.apps&resource=widgets.example.com", []string{"/registry/deployments/a/d1", "/registry/example.com/widgets/a/w1"}, 6},
		{"viewer", nil, "&exclude=configmaps&exclude=namespaces", []string{"/registry/deployments/a/d1", "/registry/example.com/widgets/a/w1"}, 6},
		{"admin", nil, "&resource=secrets&namespace=a", []string{"/registry/secrets/a/s1"}, 3},
		{"admin", nil, "", []string{"/registry/configmaps/a/c1", "/registry/configmaps/a/c2", "/registry/configmaps/b/c3",
			"/registry/deployments/a/d1", "/registry/example.com/widgets/a/w1", "/registry/namespaces/a", "/registry/secrets/a/s1"}, 20},
		{"root", []string{"system:masters"}, "&exclude=configmaps", []string{"/registry/ranges/serviceips"}, 3},
		{"root", []string{"system:masters"}, "&namespace=a", nil, 0},
	} {
		one, bodies := e.changes(tc.params, 1, tc.user, tc.groups...)
		all, _ := e.changes(tc.params, 1000, tc.user, tc.groups...)
		if !slices.Equal(one, all) {
			t.Errorf("%s%s: pages of one list %q, one page %q", tc.user, tc.params, one, all)
		}
		if got := distinct(all); len(all) != tc.n || !slices.Equal(got, tc.want) {
			t.Errorf("%s%s: %d entries of %q, want %d of %q", tc.user, tc.params, len(all), got, tc.n, tc.want)
		}
		if !slices.Contains(tc.want, "/registry/secrets/a/s1") {
			for _, b := range bodies {
				if bytes.Contains(b, []byte("/registry/secrets")) || bytes.Contains(b, []byte("secret ")) {
					t.Errorf("%s%s: an answer holds a Secret's key or value", tc.user, tc.params)
				}
			}
		}
	}
	// The store keeps the order of the log, newest first.
	if all, _ := e.changes("&resource=configmaps&namespace=a", 1000, "carol"); all[0] != "/registry/configmaps/a/c2" || all[len(all)-1] != "/registry/configmaps/a/c1" {
		t.Errorf("carol's changes are not newest first: %q", all)
	}
}

// Each (resource, namespace) is asked once per request, and a cluster-wide
// allow settles every namespace of its resource.
func TestChangesAskOncePerScope(t *testing.T) {
	e := changesEnv(t)
	e.changes("", 1000, "carol")
	asked := e.grants.questions()
	want := []string{"carol: list configmaps", "carol: list configmaps in namespace a", "carol: list namespaces",
		"carol: list widgets.example.com", "carol: list widgets.example.com in namespace a",
		"carol: list deployments.apps", "carol: list deployments.apps in namespace a",
		"carol: list configmaps in namespace b", "carol: list secrets", "carol: list secrets in namespace a"}
	slices.Sort(asked)
	slices.Sort(want)
	if !slices.Equal(asked, want) {
		t.Errorf("asked\n%q\nwant\n%q", asked, want)
	}
	before := len(e.grants.questions())
	e.changes("", 1000, "viewer")
	for _, a := range e.grants.questions()[before:] {
		if strings.Contains(a, " in namespace ") && !strings.Contains(a, "secrets") {
			t.Errorf("viewer, allowed cluster-wide, was asked per namespace: %q", a)
		}
	}
}

// Bad parameters are refused before anything is read.
func TestChangesBadParameters(t *testing.T) {
	e := changesEnv(t)
	req := q(&historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0")})
	for _, p := range []string{"&resource=", "&resource=.apps", "&exclude=configmaps/x", "&namespace=a&namespace=b", "&namespace="} {
		if code, b, _ := e.as(e.proxy, "GET", base+"/changes"+req+p, nil, "admin"); code != 400 {
			t.Errorf("changes%s: %d %s, want 400", p, code, b)
		}
	}
	desc := q(&historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Descending: true, Continue: "5.0"})
	if code, b, _ := e.as(e.proxy, "GET", base+"/changes"+desc, nil, "admin"); code != 400 || !strings.Contains(string(b), "not made for this request") {
		t.Errorf("a token no page gave: %d %s, want 400", code, b)
	}
}

// objects with range_end is the range at a revision, authorized as a Log
// of the range: list on the resource in the namespace.
func TestObjectsRange(t *testing.T) {
	e := changesEnv(t)
	rev := e.put("/registry/configmaps/a/c0", "new") - 1
	r := &historypb.Request{Key: []byte("/registry/configmaps/a/"), RangeEnd: []byte("/registry/configmaps/a0"), Revision: rev, Limit: 1}
	var got []string
	for range 10 {
		code, b, _ := e.as(e.proxy, "GET", base+"/objects"+q(r), nil, "carol")
		var gr historypb.GetResponse
		if code != 200 || proto.Unmarshal(b, &gr) != nil || gr.Revision != rev {
			t.Fatalf("objects range as carol: %d %s", code, b)
		}
		for _, kv := range gr.Kvs {
			got = append(got, string(kv.Key)+"="+string(kv.Value))
		}
		if gr.Continue == "" {
			break
		}
		r.Continue = gr.Continue
	}
	if want := []string{"/registry/configmaps/a/c1=c1 2"}; !slices.Equal(got, want) {
		t.Errorf("configmaps in a at %d: %q, want %q (c2 deleted, c0 not yet made)", rev, got, want)
	}
	for _, k := range [][2]string{{"/registry/configmaps/", "/registry/configmaps0"}, {"/registry/secrets/a/", "/registry/secrets/a0"}} {
		r := &historypb.Request{Key: []byte(k[0]), RangeEnd: []byte(k[1])}
		if code, _, _ := e.as(e.proxy, "GET", base+"/objects"+q(r), nil, "carol"); code != 403 {
			t.Errorf("objects %s as carol: %d, want 403", k[0], code)
		}
	}
}

// A page of changes asks at most 100 access questions: a caller allowed
// in one namespace of 150 gets pages that end early, each asking no more
// than that, and across them every change it may list, in order.
func TestChangesBoundTheQuestionsOfAPage(t *testing.T) {
	e := newEnv(t)
	made := e.put("/registry/namespaces/n149", "namespace n149")
	for i := range 150 {
		e.put(fmt.Sprintf("/registry/configmaps/n%03d/c", i), "v")
	}
	e.put("/registry/configmaps/n149/c", "v2")
	e.grants.allow["carol"] = []string{"list configmaps in namespace n149"}
	req := &historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Revision: made + 1}
	var keys []string
	pages := 0
	for ; pages < 10; pages++ {
		before := len(e.grants.questions())
		code, b, _ := e.as(e.proxy, "GET", base+"/changes"+q(req), nil, "carol")
		if code != 200 {
			t.Fatalf("page %d: %d %s", pages, code, b)
		}
		if asked := len(e.grants.questions()) - before; asked > 100 {
			t.Errorf("page %d asked %d questions, more than 100", pages, asked)
		}
		var lr historypb.LogResponse
		if err := proto.Unmarshal(b, &lr); err != nil {
			t.Fatal(err)
		}
		for _, en := range lr.Entries {
			keys = append(keys, string(en.Kv.Key)+"="+string(en.Kv.Value))
		}
		if lr.Continue == "" {
			break
		}
		req.Continue = lr.Continue
	}
	if want := []string{"/registry/configmaps/n149/c=v", "/registry/configmaps/n149/c=v2"}; !slices.Equal(keys, want) || pages < 1 {
		t.Errorf("carol's changes in %d pages: %q, want %q over more than one page", pages+1, keys, want)
	}
}
