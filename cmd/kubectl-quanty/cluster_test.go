package main

// The fake cluster the command-layer tests run the plugin against: a real
// store with History, served as the real aggregated API, objects written
// into it as kube-apiserver writes them, and the fake kubectl first on
// PATH.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// reviewer is the fake cluster's authorizer: admin may do anything,
// others what allow grants them, as apiagg.Access.String() renders it.
// It records each question as "user: access".
type reviewer struct {
	mu    sync.Mutex
	allow map[string][]string
	asked []string
}

func (r *reviewer) Review(_ context.Context, u user.Info, a apiagg.Access) (bool, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, u.GetName()+": "+a.String())
	return u.GetName() == "admin" || slices.Contains(r.allow[u.GetName()], a.String()), "", nil
}

// acceptAll stands in for kube-apiserver's dry runs of restores: the
// plugin's tests are about what it asks; the e2e suite holds a real
// kube-apiserver's answers (test/e2e/restoreguard_test.go).
type acceptAll struct{}

func (acceptAll) DryRun(context.Context, user.Info, apiagg.Write) error { return nil }

type cluster struct {
	t      *testing.T
	store  *mvcc.Store
	grants *reviewer
	dir    string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterOn(t, mvcc.Options{})
}

// newClusterOn is newCluster on a store with options o: a clock,
// retention rules.
func newClusterOn(t *testing.T, o mvcc.Options) *cluster {
	t.Helper()
	c := &cluster{t: t, grants: &reviewer{allow: map[string][]string{}}, dir: t.TempDir()}
	d, err := sqlite.New("sqlite://"+filepath.Join(c.dir, "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.store, err = mvcc.Open(context.Background(), d, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.store.Close() })

	serving := framework.NewCA(t, "serving-ca")
	cert, key := serving.Issue(t, framework.CertSpec{CommonName: "quantykube.kube-system.svc", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	front := framework.NewCA(t, "front-proxy-ca")
	srv, err := apiagg.New(apiagg.Config{
		Listen: "127.0.0.1:0", CertFile: cert, KeyFile: key, ClientCAFile: front.CertFile,
		Reviewer: c.grants, DryRunner: acceptAll{}, Logger: slog.New(slog.NewTextHandler(&framework.LogBuffer{}, nil)),
	}, history.New(c.store))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	proxyCert, proxyKey := front.Issue(t, framework.CertSpec{CommonName: "front-proxy-client", Client: true})

	bin := filepath.Join(c.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	docs, err := json.Marshal(fakeDiscovery())
	if err != nil {
		t.Fatal(err)
	}
	discovery := filepath.Join(c.dir, "discovery.json")
	if err := os.WriteFile(discovery, docs, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(envFake, "1")
	t.Setenv(envAPI, "https://"+srv.Addr().String())
	t.Setenv(envTLS, strings.Join([]string{serving.CertFile, proxyCert, proxyKey}, ","))
	t.Setenv(envDiscovery, discovery)
	t.Setenv(envNamespace, "shop")
	t.Setenv(envArgsLog, filepath.Join(c.dir, "kubectl-args"))
	t.Setenv(envNoAPIService, "")
	return c
}

// run runs the plugin with args, stdin as its input; it returns the exit
// status and what it printed.
func (c *cluster) run(stdin string, args ...string) (int, string, string) {
	c.t.Helper()
	return c.runIn(strings.NewReader(stdin), args...)
}

// runIn is run with in as standard input.
func (c *cluster) runIn(in io.Reader, args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	p := &plugin{in: in, out: &out, errOut: &errOut, now: time.Now, loc: time.UTC}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := p.run(ctx, args)
	return code, out.String(), errOut.String()
}

// answerAfter is standard input that answers only after change has run:
// as if someone wrote while the question was on the screen.
type answerAfter struct {
	change func()
	answer io.Reader
}

func (a *answerAfter) Read(p []byte) (int, error) {
	if a.change != nil {
		a.change()
		a.change = nil
	}
	return a.answer.Read(p)
}

// ok runs the plugin and fails the test unless it exits 0.
func (c *cluster) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("kubectl quanty %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// kubectlArgs are the command lines the fake kubectl ran.
func (c *cluster) kubectlArgs() []string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "kubectl-args"))
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (c *cluster) txn(op *pb.RequestOp) int64 {
	c.t.Helper()
	resp, err := c.store.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{op}})
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.Header.Revision
}

// put writes value at key, as kube-apiserver writes an object.
func (c *cluster) put(key string, value []byte) int64 {
	return c.txn(&pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: value}}})
}

func (c *cluster) del(key string) int64 {
	return c.txn(&pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}})
}

// value is key's value now, nil if absent.
func (c *cluster) value(key string) ([]byte, int64) {
	c.t.Helper()
	resp, err := c.store.Range(context.Background(), &pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		c.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision
}

// encode is obj as kube-apiserver stores a built-in type: Kubernetes
// protobuf.
func encode(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := protobufCodec.Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// resources builds a discovery document's resources: name, kind,
// namespaced, short names, and the verbs (default: get, list).
func resources(gv string, rs ...metav1.APIResource) metav1.APIResourceList {
	for i := range rs {
		if rs[i].Verbs == nil {
			rs[i].Verbs = metav1.Verbs{"create", "delete", "get", "list", "update", "watch"}
		}
	}
	return metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: rs}
}

func group(name string, versions ...string) metav1.APIGroup {
	g := metav1.APIGroup{Name: name}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

// fakeDiscovery is a small API server's discovery: a few core resources
// (with a subresource and a create-only one, which hold no objects),
// apps, RBAC, EndpointSlices, events.k8s.io, leases, a custom resource and
// the aggregated API itself.
func fakeDiscovery() map[string]any {
	ns := func(name, singular, kind string, short ...string) metav1.APIResource {
		return metav1.APIResource{Name: name, SingularName: singular, Kind: kind, Namespaced: true, ShortNames: short}
	}
	cl := func(name, singular, kind string, short ...string) metav1.APIResource {
		return metav1.APIResource{Name: name, SingularName: singular, Kind: kind, ShortNames: short}
	}
	return map[string]any{
		"/api/v1": resources("v1",
			metav1.APIResource{Name: "bindings", SingularName: "binding", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			ns("configmaps", "configmap", "ConfigMap", "cm"),
			ns("endpoints", "endpoints", "Endpoints", "ep"),
			ns("events", "event", "Event", "ev"),
			cl("namespaces", "namespace", "Namespace", "ns"),
			cl("nodes", "node", "Node", "no"),
			ns("pods", "pod", "Pod", "po"),
			ns("pods/status", "", "Pod"),
			ns("secrets", "secret", "Secret"),
			ns("serviceaccounts", "serviceaccount", "ServiceAccount", "sa"),
			ns("services", "service", "Service", "svc"),
		),
		"/apis": metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{
			group("apps", "v1"), group("events.k8s.io", "v1"), group("rbac.authorization.k8s.io", "v1"),
			group("discovery.k8s.io", "v1"), group("coordination.k8s.io", "v1"), group("example.com", "v1", "v1beta1"), group("quanty.quantyroot.io", "v1alpha1"),
		}},
		"/apis/apps/v1":                      resources("apps/v1", ns("deployments", "deployment", "Deployment", "deploy"), ns("replicasets", "replicaset", "ReplicaSet", "rs")),
		"/apis/events.k8s.io/v1":             resources("events.k8s.io/v1", ns("events", "event", "Event", "ev")),
		"/apis/rbac.authorization.k8s.io/v1": resources("rbac.authorization.k8s.io/v1", cl("clusterroles", "clusterrole", "ClusterRole"), ns("rolebindings", "rolebinding", "RoleBinding"), ns("roles", "role", "Role")),
		"/apis/discovery.k8s.io/v1":          resources("discovery.k8s.io/v1", ns("endpointslices", "endpointslice", "EndpointSlice")),
		"/apis/coordination.k8s.io/v1":       resources("coordination.k8s.io/v1", ns("leases", "lease", "Lease")),
		"/apis/example.com/v1":               resources("example.com/v1", ns("widgets", "widget", "Widget", "wd")),
		"/apis/example.com/v1beta1":          resources("example.com/v1beta1", ns("widgets", "widget", "Widget", "wd")),
		"/apis/quanty.quantyroot.io/v1alpha1": resources("quanty.quantyroot.io/v1alpha1",
			metav1.APIResource{Name: "logs", Kind: "Log", Verbs: metav1.Verbs{"list"}},
			metav1.APIResource{Name: "restores", Kind: "Restore", Verbs: metav1.Verbs{"create"}}),
	}
}
