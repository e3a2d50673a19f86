package apiagg

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
)

// The dry run goes to kube-apiserver with dryRun=All, as the caller
// (every part of the identity impersonated), with the store's own
// credentials; kube-apiserver's refusal comes back as its Status, and a
// refusal of the store's impersonation is not mistaken for the caller's.
func TestAPIDryRunner(t *testing.T) {
	var got *http.Request
	var body []byte
	answer := func(w http.ResponseWriter) {}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r, nil
		body, _ = io.ReadAll(r.Body)
		answer(w)
	}))
	defer api.Close()
	c, err := newAPIClient(&rest.Config{Host: api.URL, BearerToken: "store-token"})
	if err != nil {
		t.Fatal(err)
	}
	d := &apiDryRunner{c}
	alice := &user.DefaultInfo{Name: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}, Extra: map[string][]string{"scopes": {"a", "b"}}}
	w := Write{Method: "PUT", Path: "/apis/rbac.authorization.k8s.io/v1/namespaces/ns1/roles/r", Body: []byte("k8s\x00..."), ContentType: protobufContentType}

	answer = func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }
	if err := d.DryRun(t.Context(), alice, w); err != nil {
		t.Fatalf("accepted: %v", err)
	}
	h := got.Header
	if got.Method != "PUT" || got.URL.Path != w.Path || got.URL.Query().Get("dryRun") != "All" || string(body) != "k8s\x00..." ||
		h.Get("Content-Type") != protobufContentType || h.Get("Authorization") != "Bearer store-token" {
		t.Errorf("sent %s %s, Content-Type %q, Authorization %q, body %q", got.Method, got.URL, h.Get("Content-Type"), h.Get("Authorization"), body)
	}
	if h.Get("Impersonate-User") != "alice" || h.Get("Impersonate-Uid") != "u-1" || strings.Join(h.Values("Impersonate-Group"), ",") != "devs,system:authenticated" ||
		strings.Join(h.Values("Impersonate-Extra-Scopes"), ",") != "a,b" {
		t.Errorf("impersonated %v", h)
	}

	status := func(code int, msg string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Code: int32(code), Reason: metav1.StatusReasonForbidden, Message: msg})
		}
	}
	answer = status(http.StatusForbidden, `roles.rbac.authorization.k8s.io "r" is forbidden: user "alice" is attempting to grant RBAC permissions not currently held`)
	err = d.DryRun(t.Context(), alice, w)
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != 403 || !strings.Contains(se.ErrStatus.Message, "attempting to grant RBAC permissions") {
		t.Fatalf("refused: %v, want kube-apiserver's Status", err)
	}
	answer = status(http.StatusForbidden, `users "alice" is forbidden: User "quantykube-store" cannot impersonate resource "users" in API group "" at the cluster scope`)
	if err := d.DryRun(t.Context(), alice, w); errors.As(err, &se) || err == nil || !strings.Contains(err.Error(), "may not impersonate") {
		t.Fatalf("the store's impersonation refused: %v, want an error of the store's own", err)
	}
	answer = func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }
	if err := d.DryRun(t.Context(), alice, w); errors.As(err, &se) || err == nil {
		t.Fatalf("no Status: %v", err)
	}
}

func TestObjectPath(t *testing.T) {
	for _, c := range []struct{ apiVersion, resource, ns, name, want string }{
		{"v1", "configmaps", "ns1", "a", "/api/v1/namespaces/ns1/configmaps/a"},
		{"v1", "namespaces", "", "team", "/api/v1/namespaces/team"},
		{"apps/v1", "deployments", "ns1", "", "/apis/apps/v1/namespaces/ns1/deployments"},
		{"rbac.authorization.k8s.io/v1", "clusterrolebindings", "", "x", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/x"},
	} {
		if got, err := objectPath(c.apiVersion, c.resource, c.ns, c.name); err != nil || got != c.want {
			t.Errorf("objectPath(%q, %q, %q, %q) = %q, %v; want %q", c.apiVersion, c.resource, c.ns, c.name, got, err, c.want)
		}
	}
	if _, err := objectPath("a/b/c", "x", "", ""); err == nil {
		t.Error("apiVersion a/b/c was accepted")
	}
}

// A dry-run DELETE says dryRun in its body: kube-apiserver takes a
// DELETE's options from the body when there is one and ignores the
// query's, so a body without it would delete the object for real.
func TestDeleteBodyIsADryRun(t *testing.T) {
	b, err := deleteBody("uid-1", "42")
	if err != nil {
		t.Fatal(err)
	}
	var opts metav1.DeleteOptions
	if err := json.Unmarshal(b, &opts); err != nil {
		t.Fatal(err)
	}
	if len(opts.DryRun) != 1 || opts.DryRun[0] != metav1.DryRunAll {
		t.Errorf("DeleteOptions %s: want dryRun [All]", b)
	}
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != "uid-1" ||
		opts.Preconditions.ResourceVersion == nil || *opts.Preconditions.ResourceVersion != "42" {
		t.Errorf("DeleteOptions %s: want the uid and resourceVersion as preconditions", b)
	}
}
