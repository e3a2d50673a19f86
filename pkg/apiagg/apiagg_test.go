package apiagg_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
	"github.com/quantyroot/quantykube/test/framework"
)

// grants is a fake authorizer: the accesses it allows, per user, as
// Access.String() renders them; it records every question.
type grants struct {
	mu    sync.Mutex
	allow map[string][]string
	asked []string
}

func (g *grants) Review(_ context.Context, u user.Info, a apiagg.Access) (bool, string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := u.GetName() + ": " + a.String()
	g.asked = append(g.asked, q)
	// As RBAC: a grant in every namespace (a ClusterRoleBinding) covers
	// each namespace, and a grant of every name each name.
	anyName := a
	anyName.Name = ""
	everywhere := anyName
	everywhere.Namespace = ""
	for _, s := range g.allow[u.GetName()] {
		if s == a.String() || s == anyName.String() || s == everywhere.String() {
			return true, "", nil
		}
	}
	return false, "no RBAC rule allows it", nil
}

func (g *grants) questions() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.asked...)
}

// env is the aggregated API over a store, and clients as the front proxy
// and as others.
type env struct {
	t       *testing.T
	store   *mvcc.Store
	start   int64 // the revision the tests' namespaces exist at, and nothing else
	url     string
	proxy   *http.Client // kube-apiserver's front proxy
	grants  *grants
	dry     *dryRuns
	cluster *cluster
	audit   *framework.LogBuffer
	pki     struct{ serving, front, other *framework.CA }
}

// testNamespaces exist in every env from its first revisions on.
var testNamespaces = []string{"a", "b", "ns", "ns1", "ns2", "kube-system", "zz-team", "zz-team0"}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, apiagg.Config{})
}

// newEnvWith is newEnv with cfg's RestoreCheck, RawAccessGroups and
// Reviewer (nil: e.grants).
func newEnvWith(t *testing.T, cfg apiagg.Config) *env {
	t.Helper()
	e := &env{t: t, grants: &grants{allow: map[string][]string{}}, dry: &dryRuns{}, audit: &framework.LogBuffer{}}
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.store, err = mvcc.Open(context.Background(), d, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	// The namespaces the tests' objects live in exist before them, as
	// kube-apiserver's admission makes sure of: history older than its
	// namespace as it exists now is another incarnation's (nsBounds).
	for _, ns := range testNamespaces {
		e.start = e.put("/registry/namespaces/"+ns, "namespace "+ns)
	}

	e.pki.serving = framework.NewCA(t, "serving-ca")
	cert, key := e.pki.serving.Issue(t, framework.CertSpec{CommonName: "quantykube.kube-system.svc", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	e.pki.front = framework.NewCA(t, "front-proxy-ca")
	e.pki.other = framework.NewCA(t, "other-ca")
	cfg.Listen, cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile = "127.0.0.1:0", cert, key, e.pki.front.CertFile
	if cfg.Reviewer == nil {
		cfg.Reviewer = e.grants
	}
	e.cluster = &cluster{status: map[string]bool{}, ips: map[string]string{}}
	cfg.Cluster = e.cluster
	cfg.DryRunner, cfg.Logger = e.dry, slog.New(slog.NewTextHandler(e.audit, nil))
	srv, err := apiagg.New(cfg, history.New(e.store))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	e.url = "https://" + srv.Addr().String()
	e.proxy = e.client(e.pki.front, "front-proxy-client")
	return e
}

// client is an HTTPS client with a client certificate named cn from ca
// (no certificate when ca is nil), trusting the serving CA.
func (e *env) client(ca *framework.CA, cn string) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(e.pki.serving.Cert)
	tc := &tls.Config{RootCAs: roots}
	if ca != nil {
		cf, kf := ca.Issue(e.t, framework.CertSpec{CommonName: cn, Client: true})
		c, err := tls.LoadX509KeyPair(cf, kf)
		if err != nil {
			e.t.Fatal(err)
		}
		// Sent whatever CAs the server says it accepts: a client that
		// forges its way in would.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 20 * time.Second}
}

// as is a request from the front proxy on behalf of a user.
func (e *env) as(c *http.Client, method, path string, body []byte, name string, groups ...string) (int, []byte, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if name != "" {
		req.Header.Set("X-Remote-User", name)
	}
	for _, g := range groups {
		req.Header.Add("X-Remote-Group", g)
	}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func q(r *historypb.Request) string {
	b, err := proto.Marshal(r)
	if err != nil {
		panic(err)
	}
	return "?q=" + base64.RawURLEncoding.EncodeToString(b)
}

func (e *env) put(key, value string) int64 {
	e.t.Helper()
	resp, err := e.store.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value)}}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.Revision
}

func (e *env) del(key string) int64 {
	e.t.Helper()
	resp, err := e.store.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.Revision
}

// status decodes a Status answer.
func status(t *testing.T, b []byte) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(b, &st); err != nil || st.Kind != "Status" {
		t.Fatalf("not a Status: %v %q", err, b)
	}
	return st
}

const base = "/apis/quanty.quantyroot.io/v1alpha1"

func TestDiscovery(t *testing.T) {
	e := newEnv(t)
	code, b, _ := e.as(e.proxy, "GET", base, nil, "system:kube-aggregator")
	var rl metav1.APIResourceList
	if err := json.Unmarshal(b, &rl); code != 200 || err != nil || rl.GroupVersion != "quanty.quantyroot.io/v1alpha1" || len(rl.APIResources) != 4 {
		t.Fatalf("resource list: %d %v %s", code, err, b)
	}
	verbs := map[string]string{}
	for _, r := range rl.APIResources {
		verbs[r.Name] = strings.Join(r.Verbs, ",")
		if r.Namespaced {
			t.Errorf("%s is namespaced", r.Name)
		}
	}
	if verbs["logs"] != "list" || verbs["objects"] != "list" || verbs["changes"] != "list" || verbs["restores"] != "create" {
		t.Errorf("verbs %v: a GET without a name is list, a POST is create", verbs)
	}

	req, _ := http.NewRequest("GET", e.url+"/apis", nil)
	req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")
	req.Header.Set("X-Remote-User", "system:kube-aggregator")
	resp, err := e.proxy.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var dl apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(b, &dl); err != nil || resp.StatusCode != 200 || len(dl.Items) != 1 || dl.Items[0].Name != apiagg.Group ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json;g=apidiscovery.k8s.io;v=v2") {
		t.Fatalf("aggregated discovery: %d %s %v %s", resp.StatusCode, resp.Header.Get("Content-Type"), err, b)
	}

	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	resp, err = e.proxy.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotAcceptable || status(t, b).Code != 406 {
		t.Fatalf("protobuf discovery: %d %s, want 406", resp.StatusCode, b)
	}

	for path, want := range map[string]int{"/openapi/v2": 404, "/openapi/v3": 404, base + "/widgets": 404} {
		if code, b, _ := e.as(e.proxy, "GET", path, nil, "u"); code != want || status(t, b).Code != int32(want) {
			t.Errorf("GET %s: %d %s", path, code, b)
		}
	}
	if code, b, h := e.as(e.proxy, "DELETE", base+"/logs", nil, "u"); code != 405 || status(t, b).Reason != metav1.StatusReasonMethodNotAllowed || h.Get("Allow") != "GET" {
		t.Errorf("DELETE logs: %d %s", code, b)
	}
	if code, _, _ := e.as(e.proxy, "GET", base+"/restores", nil, "u"); code != 405 {
		t.Errorf("GET restores: %d, want 405", code)
	}
}

// Only the front proxy may call, and only with an identity; probes reach
// the health checks without a certificate.
func TestFrontProxyOnly(t *testing.T) {
	e := newEnv(t)
	e.put("/registry/configmaps/ns1/c", "v")
	e.grants.allow["mallory"] = []string{"get configmaps c in namespace ns1"}
	path := base + "/objects" + q(&historypb.Request{Key: []byte("/registry/configmaps/ns1/c")})

	// The front proxy's client, the caller's headers: allowed.
	if code, b, _ := e.as(e.proxy, "GET", path, nil, "mallory"); code != 200 {
		t.Fatalf("front proxy: %d %s", code, b)
	}
	// The front-proxy CA, but another name, forging the headers.
	other := e.client(e.pki.front, "not-the-front-proxy")
	if code, b, _ := e.as(other, "GET", path, nil, "mallory", "system:masters"); code != 401 {
		t.Errorf("another name from the front-proxy CA: %d %s, want 401", code, b)
	}
	// Another CA entirely, with the allowed name: the handshake itself fails.
	if resp, err := e.client(e.pki.other, "front-proxy-client").Get(e.url + path); err == nil {
		resp.Body.Close()
		t.Errorf("a client certificate from another CA was accepted: %d", resp.StatusCode)
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("another CA: %v", err)
	}
	// No certificate, forged headers.
	none := e.client(nil, "")
	if code, _, _ := e.as(none, "GET", path, nil, "mallory", "system:masters"); code != 401 {
		t.Errorf("no certificate: %d, want 401", code)
	}
	// The front proxy without X-Remote-User.
	if code, _, _ := e.as(e.proxy, "GET", path, nil, ""); code != 401 {
		t.Errorf("no X-Remote-User: %d, want 401", code)
	}
	for _, p := range []string{"/healthz", "/readyz", "/livez"} {
		if code, b, _ := e.as(none, "GET", p, nil, ""); code != 200 || string(b) != "ok" {
			t.Errorf("%s without a certificate: %d %q", p, code, b)
		}
	}
	if !strings.Contains(e.audit.String(), "refused an unauthenticated request") {
		t.Error("refusals are not in the audit log")
	}
}

// Each read asks, as the caller, for access to exactly what it names.
func TestReadsAskForTheObject(t *testing.T) {
	e := newEnv(t)
	rev := e.put("/registry/secrets/ns1/s", "old")
	e.put("/registry/secrets/ns1/s", "new")
	e.put("/registry/ranges/serviceips", "bitmap")
	e.grants.allow["alice"] = []string{"get secrets s in namespace ns1", "list secrets in namespace ns1"}

	get := base + "/objects" + q(&historypb.Request{Key: []byte("/registry/secrets/ns1/s"), Revision: rev})
	code, b, h := e.as(e.proxy, "GET", get, nil, "alice", "devs")
	var gr historypb.GetResponse
	if code != 200 || h.Get("Content-Type") != "application/vnd.google.protobuf" || proto.Unmarshal(b, &gr) != nil || string(gr.Kv.GetValue()) != "old" {
		t.Fatalf("get as alice: %d %s %v", code, h.Get("Content-Type"), &gr)
	}
	code, b, _ = e.as(e.proxy, "GET", get, nil, "bob")
	st := status(t, b)
	if code != 403 || st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, `User "bob" cannot get resource "secrets"`) ||
		!strings.Contains(st.Message, `in the namespace "ns1"`) {
		t.Fatalf("get as bob: %d %s", code, st.Message)
	}
	if !strings.Contains(e.audit.String(), "audit: denied") || !strings.Contains(e.audit.String(), "user=bob") {
		t.Error("the denial is not in the audit log")
	}

	log := base + "/logs" + q(&historypb.Request{Key: []byte("/registry/secrets/ns1/"), RangeEnd: []byte("/registry/secrets/ns10")})
	code, b, _ = e.as(e.proxy, "GET", log, nil, "alice")
	var lr historypb.LogResponse
	if code != 200 || proto.Unmarshal(b, &lr) != nil || len(lr.Entries) != 2 {
		t.Fatalf("namespace log as alice: %d %v", code, &lr)
	}
	allNS := base + "/logs" + q(&historypb.Request{Key: []byte("/registry/secrets/"), RangeEnd: []byte("/registry/secrets0")})
	if code, _, _ := e.as(e.proxy, "GET", allNS, nil, "alice"); code != 403 {
		t.Errorf("every namespace's secrets as alice (list in ns1 only): %d, want 403", code)
	}

	raw := base + "/objects" + q(&historypb.Request{Key: []byte("/registry/ranges/serviceips")})
	if code, _, _ := e.as(e.proxy, "GET", raw, nil, "alice"); code != 403 {
		t.Errorf("a raw key as alice: %d, want 403", code)
	}
	if code, b, _ := e.as(e.proxy, "GET", raw, nil, "root", "system:masters"); code != 200 {
		t.Errorf("a raw key as system:masters: %d %s", code, b)
	}
	wide := base + "/logs" + q(&historypb.Request{Key: []byte("/registry/"), RangeEnd: []byte("/registry0")})
	if code, _, _ := e.as(e.proxy, "GET", wide, nil, "alice"); code != 403 {
		t.Errorf("a range over every resource as alice: %d, want 403", code)
	}

	// The namespace's log reaches back before ns1's creation (from the
	// oldest retained): whether alice may see its earlier incarnations is
	// asked once, as list in every namespace.
	want := []string{
		"alice: get secrets s in namespace ns1", "bob: get secrets s in namespace ns1",
		"alice: list secrets in namespace ns1", "alice: list secrets", "alice: list secrets",
	}
	if got := e.grants.questions(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("questions asked:\n%q\nwant\n%q", got, want)
	}
}

// A restore asks for the verb of the change it makes: update, create,
// delete; a refused restore writes nothing; an allowed one is audited.
func TestRestoreVerbs(t *testing.T) {
	e := newEnv(t)
	key := "/registry/configmaps/ns1/app"
	created := e.put(key, configMap("app", "v1"))
	e.put(key, configMap("app", "v2"))
	deleted := e.del(key)
	e.grants.allow["bob"] = []string{"get configmaps app in namespace ns1"}
	restore := func(user string, rev int64, contentType string) (int, []byte) {
		body, _ := proto.Marshal(&historypb.Request{Key: []byte(key), Revision: rev})
		req, _ := http.NewRequest("POST", e.url+base+"/restores", bytes.NewReader(body))
		req.Header.Set("X-Remote-User", user)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := e.proxy.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	// Bringing the deleted object back is a create: refused without it.
	if code, b := restore("bob", created, ""); code != 403 || !strings.Contains(status(t, b).Message, "cannot create resource \"configmaps\"") {
		t.Fatalf("restore as bob: %d %s", code, b)
	}
	if e.store.Rev() != deleted {
		t.Fatal("a refused restore wrote")
	}
	e.grants.allow["carol"] = []string{"get configmaps app in namespace ns1", "create configmaps in namespace ns1", "update configmaps app in namespace ns1", "delete configmaps app in namespace ns1"}
	code, b := restore("carol", created, "") // no Content-Type, as kubectl create --raw -f sends
	var rr historypb.RestoreResponse
	if code != 200 || proto.Unmarshal(b, &rr) != nil || rr.NewRevision != deleted+1 || string(rr.Kv.GetValue()) != configMap("app", "v1") {
		t.Fatalf("restore as carol: %d %v", code, &rr)
	}
	if code, _ := restore("carol", created+1, "application/octet-stream"); code != 200 {
		t.Fatalf("restore to v2 (an update): %d", code)
	}
	if code, _ := restore("carol", deleted, "application/vnd.google.protobuf"); code != 200 {
		t.Fatalf("restore to deleted (a delete): %d", code)
	}
	var carol []string
	for _, q := range e.grants.questions() {
		if strings.HasPrefix(q, "carol:") {
			carol = append(carol, strings.Fields(q)[1])
		}
	}
	// get comes first, before the revision is resolved, for each restore.
	if strings.Join(carol, ",") != "get,create,get,update,get,delete" {
		t.Errorf("carol was asked for %v, want get and create, get and update, get and delete", carol)
	}
	if got := e.dry.methods(); strings.Join(got, ",") != "POST,PUT,DELETE" {
		t.Errorf("dry runs %v, want a create, an update and a delete", got)
	}
	if n := strings.Count(e.audit.String(), "audit: restore"); n != 3 || !strings.Contains(e.audit.String(), "user=carol") {
		t.Errorf("%d restores audited:\n%s", n, e.audit.String())
	}
}

// A restore whose if_mod_revision the key no longer has is 409 Conflict,
// naming the state the key is in, and writes nothing; the state is told
// only to a caller who may make the change.
func TestRestoreIfModRevision(t *testing.T) {
	e := newEnv(t)
	key := "/registry/configmaps/ns1/app"
	first := e.put(key, configMap("app", "v1"))
	second := e.put(key, configMap("app", "v2"))
	e.grants.allow["carol"] = []string{"get configmaps app in namespace ns1", "update configmaps app in namespace ns1"}
	e.grants.allow["bob"] = []string{"get configmaps app in namespace ns1"}
	restore := func(user string, ifMod int64) (int, []byte) {
		body, err := proto.Marshal(&historypb.Request{Key: []byte(key), Revision: first, IfModRevision: proto.Int64(ifMod)})
		if err != nil {
			t.Fatal(err)
		}
		code, b, _ := e.as(e.proxy, "POST", base+"/restores", body, user)
		return code, b
	}
	// carol saw the key before v2 was written.
	code, b := restore("carol", first)
	if code != http.StatusConflict {
		t.Fatalf("restore over a changed key: %d %q, want 409", code, b)
	}
	if st := status(t, b); st.Reason != metav1.StatusReasonConflict || !strings.Contains(st.Message, fmt.Sprintf("it is at mod_revision %d, not at mod_revision %d", second, first)) {
		t.Fatalf("restore over a changed key: %+v", st)
	}
	if code, b := restore("bob", first); code != http.StatusForbidden || strings.Contains(string(b), "mod_revision") {
		t.Fatalf("restore as bob, who may not update: %d %s", code, b)
	}
	if e.store.Rev() != second {
		t.Fatal("a refused restore wrote")
	}
	code, b = restore("carol", second)
	var rr historypb.RestoreResponse
	if code != http.StatusOK || proto.Unmarshal(b, &rr) != nil || rr.NewRevision != second+1 || string(rr.Kv.GetValue()) != configMap("app", "v1") {
		t.Fatalf("restore over the key as carol saw it: %d %s", code, b)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	e.put("/registry/configmaps/ns1/c", "v")
	e.grants.allow["u"] = []string{"get configmaps c in namespace ns1"}
	cases := []struct {
		name, method, path string
		body               []byte
		code               int
	}{
		{"no q", "GET", base + "/objects", nil, 400},
		{"q not base64", "GET", base + "/objects?q=%%%", nil, 400},
		{"q not a Request", "GET", base + "/objects?q=" + base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xff, 0xff}), nil, 400},
		{"two q", "GET", base + "/objects" + q(&historypb.Request{Key: []byte("k")}) + "&q=AA", nil, 400},
		{"no key", "GET", base + "/objects" + q(&historypb.Request{Revision: 1}), nil, 400},
		{"revision and time", "GET", base + "/objects" + q(&historypb.Request{Key: []byte("/registry/configmaps/ns1/c"), Revision: 1, UnixMs: 1}), nil, 400},
		{"future revision", "GET", base + "/objects" + q(&historypb.Request{Key: []byte("/registry/configmaps/ns1/c"), Revision: 1000}), nil, 410},
		{"q too large", "GET", base + "/objects?q=" + strings.Repeat("A", 100<<10), nil, 413},
		{"body not a Request", "POST", base + "/restores", []byte("{\"key\": \"x\"}"), 400},
		{"body too large", "POST", base + "/restores", bytes.Repeat([]byte{0}, 100<<10), 413},
	}
	for _, c := range cases {
		code, b, _ := e.as(e.proxy, c.method, c.path, c.body, "u")
		if code != c.code || status(t, b).Code != int32(c.code) {
			t.Errorf("%s: %d %s, want %d", c.name, code, b, c.code)
		}
	}
	code, b, _ := e.as(e.proxy, "GET", base+"/objects"+q(&historypb.Request{Key: []byte("/registry/configmaps/ns1/c"), Revision: 1000}), nil, "u")
	if st := status(t, b); code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Errorf("out of range: %d %s, want 410 Expired", code, st.Reason)
	}
}

// Without credentials for SubjectAccessReviews and dry runs the server
// refuses to start, unless the operator turns both checks off by name.
func TestNeedsCredentialsForReviews(t *testing.T) {
	ca := framework.NewCA(t, "ca")
	cert, key := ca.Issue(t, framework.CertSpec{CommonName: "s", DNSNames: []string{"s"}})
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg := apiagg.Config{Listen: "127.0.0.1:0", CertFile: cert, KeyFile: key, ClientCAFile: ca.CertFile}
	_, err := apiagg.New(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "--api-kubeconfig") || !strings.Contains(err.Error(), "--api-insecure-skip-object-authorization") {
		t.Fatalf("no credentials: %v", err)
	}
	cfg.InsecureSkipObjectAuthorization = true
	if _, err := apiagg.New(cfg, nil); err == nil || !strings.Contains(err.Error(), "--api-restore-check=none") {
		t.Fatalf("no credentials for restores' dry runs: %v", err)
	}
	cfg.RestoreCheck = apiagg.RestoreCheckNone
	if _, err := apiagg.New(cfg, nil); err != nil {
		t.Fatalf("with both checks off: %v", err)
	}
	cfg.RestoreCheck = "maybe"
	if _, err := apiagg.New(cfg, nil); err == nil || !strings.Contains(err.Error(), "--api-restore-check") {
		t.Fatalf("an unknown --api-restore-check: %v", err)
	}
	cfg.RestoreCheck = ""
	cfg.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	cfg.InsecureSkipObjectAuthorization = false
	if _, err := apiagg.New(cfg, nil); err == nil {
		t.Fatal("a missing kubeconfig was accepted")
	}
	if _, err := os.Stat(cfg.Kubeconfig); err == nil {
		t.Fatal("the kubeconfig was created")
	}
}

// A namespace made again under a deleted one's name does not hand its
// history on: a caller allowed in the namespace reads what happened since
// it was made, and is refused what came before; a caller allowed in every
// namespace, and the raw-access groups, read it all.
func TestReusedNamespaceKeepsItsHistory(t *testing.T) {
	e := newEnv(t)
	key := "/registry/secrets/zz-team/token"
	old := e.put(key, "the first tenant's token")
	e.del(key)
	e.del("/registry/namespaces/zz-team")
	made := e.put("/registry/namespaces/zz-team", "namespace zz-team, again")
	e.put(key, "the second tenant's token")
	e.grants.allow["tenant"] = []string{"get secrets token in namespace zz-team", "list secrets in namespace zz-team", "update secrets token in namespace zz-team"}
	e.grants.allow["admin"] = []string{"get secrets", "list secrets", "update secrets token in namespace zz-team"}
	e.grants.allow["root"] = e.grants.allow["tenant"]

	getOld := base + "/objects" + q(&historypb.Request{Key: []byte(key), Revision: old})
	code, b, _ := e.as(e.proxy, "GET", getOld, nil, "tenant")
	if code != 403 || !strings.Contains(status(t, b).Message, "older than the namespace \"zz-team\" as it exists now") || bytes.Contains(b, []byte("first tenant")) {
		t.Errorf("the old token as the new tenant: %d %s, want 403", code, b)
	}
	if code, b, _ := e.as(e.proxy, "GET", getOld, nil, "admin"); code != 200 || !bytes.Contains(b, []byte("first tenant")) {
		t.Errorf("the old token as a cluster-wide reader: %d %s", code, b)
	}
	if code, b, _ := e.as(e.proxy, "GET", getOld, nil, "root", "system:masters"); code != 200 || !bytes.Contains(b, []byte("first tenant")) {
		t.Errorf("the old token as system:masters: %d %s", code, b)
	}
	for _, r := range []*historypb.Request{
		{Key: []byte(key)},
		{Key: []byte("/registry/secrets/zz-team/"), RangeEnd: []byte("/registry/secrets/zz-team0")},
		{Key: []byte(key), Descending: true, Limit: 1},
	} {
		code, b, _ := e.as(e.proxy, "GET", base+"/logs"+q(r), nil, "tenant")
		var lr historypb.LogResponse
		if code != 200 || proto.Unmarshal(b, &lr) != nil || len(lr.Entries) != 1 || lr.Entries[0].Revision <= made || bytes.Contains(b, []byte("first tenant")) {
			t.Errorf("log %q.. as the new tenant: %d %v, want the one change since %d", r.Key, code, &lr, made)
		}
		code, b, _ = e.as(e.proxy, "GET", base+"/logs"+q(r), nil, "admin")
		if code != 200 || proto.Unmarshal(b, &lr) != nil || len(lr.Entries) < 2 && !r.Descending {
			t.Errorf("log %q.. as a cluster-wide reader: %d %v", r.Key, code, &lr)
		}
	}
	if code, b := e.restore("tenant", &historypb.Request{Key: []byte(key), Revision: old}); code != 403 || !strings.Contains(status(t, b).Message, "earlier namespace") {
		t.Errorf("a restore of the old token as the new tenant: %d %s, want 403", code, b)
	}
}
