package apiagg

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// remoteHeaders reads the front proxy's headers exactly as
// k8s.io/apiserver's headerrequest authenticator does (which the binary
// does not import, ADR-010): same user, same groups, same extra, and the
// same headers removed.
func TestRemoteHeadersAsKubernetes(t *testing.T) {
	kube, err := headerrequest.New([]string{nameHeader}, []string{uidHeader}, []string{groupHeader}, []string{extraPrefix})
	if err != nil {
		t.Fatal(err)
	}
	cases := []http.Header{
		{},
		{"X-Remote-User": {"alice"}},
		{"X-Remote-User": {"alice", "mallory"}, "X-Remote-Uid": {"42"}},
		{"X-Remote-User": {"bob"}, "X-Remote-Group": {"devs", "", "system:authenticated"}},
		{"X-Remote-User": {"carol"}, "X-Remote-Extra-Scopes": {"a", "b"}, "X-Remote-Extra-Example.com%2fteam": {"blue"}, "X-Remote-Extra-Bad%zz": {"kept"}},
		{"X-Remote-User": {"dave"}, "x-remote-extra-lower": {"v"}, "X-Other": {"stays"}},
		{"X-Remote-Group": {"no-user"}, "X-Remote-Extra-K": {"v"}},
	}
	for i, h := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			a, b := &http.Request{Header: h.Clone()}, &http.Request{Header: h.Clone()}
			ra, oka, erra := remoteHeaders{}.AuthenticateRequest(a)
			rb, okb, errb := kube.AuthenticateRequest(b)
			if oka != okb || (erra == nil) != (errb == nil) {
				t.Fatalf("ok %v/%v err %v/%v", oka, okb, erra, errb)
			}
			if !oka {
				return
			}
			if !reflect.DeepEqual(ra.User, rb.User) {
				t.Errorf("user %#v, kubernetes reads %#v", ra.User, rb.User)
			}
			if !reflect.DeepEqual(a.Header, b.Header) {
				t.Errorf("headers left %v, kubernetes leaves %v", a.Header, b.Header)
			}
		})
	}
}

// The SubjectAccessReview carries the whole identity and question, goes to
// kube-apiserver once per decision while it is kept, and a denial answers
// with kube-apiserver's reason.
func TestSubjectAccessReview(t *testing.T) {
	var posts atomic.Int32
	var last authzv1.SubjectAccessReview
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/apis/authorization.k8s.io/v1/subjectaccessreviews" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		posts.Add(1)
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &last); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		last.Status.Allowed = last.Spec.User == "alice"
		if !last.Status.Allowed {
			last.Status.Reason = "RBAC: no rule"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&last)
	}))
	defer api.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(strings.ReplaceAll(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: SERVER}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, "SERVER", api.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := restConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := newSARReviewer(rc)
	if err != nil {
		t.Fatal(err)
	}
	alice := &user.DefaultInfo{Name: "alice", UID: "u1", Groups: []string{"devs"}, Extra: map[string][]string{"scopes": {"x"}}}
	a := Access{Verb: "get", Resource: storagekey.Resource{Group: "", Resource: "secrets", Namespaced: true}, Namespace: "ns1", Name: "s"}
	for range 3 {
		ok, _, err := rev.Review(t.Context(), alice, a)
		if err != nil || !ok {
			t.Fatalf("alice: %v %v", ok, err)
		}
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("%d reviews for one decision asked three times, want 1 (kept)", n)
	}
	want := authzv1.SubjectAccessReviewSpec{User: "alice", UID: "u1", Groups: []string{"devs"}, Extra: map[string]authzv1.ExtraValue{"scopes": {"x"}},
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "ns1", Name: "s"}}
	if !reflect.DeepEqual(last.Spec, want) || last.Kind != "SubjectAccessReview" || last.APIVersion != "authorization.k8s.io/v1" {
		t.Errorf("review sent %+v", last)
	}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"devs"}}
	ok, reason, err := rev.Review(t.Context(), bob, a)
	if err != nil || ok || reason != "RBAC: no rule" {
		t.Fatalf("bob: %v %q %v", ok, reason, err)
	}
	// Another question of the same user is another review.
	a.Verb = "list"
	if _, _, err := rev.Review(t.Context(), alice, a); err != nil || posts.Load() != 3 {
		t.Fatalf("a new question: %v, %d reviews", err, posts.Load())
	}
	api.Close()
	a.Name = "other"
	if _, _, err := rev.Review(t.Context(), alice, a); err == nil {
		t.Fatal("no error with kube-apiserver gone")
	}
	z := &authorizer{reviewer: rev, keys: storagekey.New(""), log: slog.New(slog.DiscardHandler)}
	err = z.check(withUser(alice), a)
	if err == nil || !strings.Contains(err.Error(), "cannot check access") {
		t.Fatalf("an unreachable kube-apiserver: %v, want unavailable", err)
	}
}

// withUser is a context carrying an authenticated caller.
func withUser(u user.Info) context.Context {
	return context.WithValue(context.Background(), userKey{}, u)
}
