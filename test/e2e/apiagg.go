package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// AggregatedAPI is QuantyKube's `serve --api-listen` in the cluster's
// network namespace, registered with kube-apiserver by the objects the
// chart's external profile renders (docs/helm.md), with the certificate
// `quantykube apiservice` writes (docs/AGGREGATED-API.md).
type AggregatedAPI struct {
	Netns *Netns
	Port  int
	// Dir holds the serving certificate and its CA; Manifests is what
	// `helm template` of the chart's external profile rendered.
	Dir       string
	Manifests []byte
	// reviewer is the kubeconfig QuantyKube asks kube-apiserver with.
	reviewer string
	// retained is a ConfigMap under a short retention rule, written when
	// the cluster started: its first revision leaves the window early.
	retained struct {
		key       string
		first     int64
		writtenAt time.Time
	}
}

// RetainedNamespace is kept only RetainedFor (the shortest retention
// QuantyKube allows), so that a check can ask for a revision that left
// the window.
const (
	RetainedNamespace = "e2e-retention"
	RetainedFor       = 75 * time.Second
)

// The user QuantyKube authenticates as to create SubjectAccessReviews.
const storeUser = "quantykube-store"

func prepareAggregatedAPI(t *testing.T, c *Cluster, n *Netns) *AggregatedAPI {
	t.Helper()
	a := &AggregatedAPI{Netns: n, Port: 20000 + rand.IntN(12000), Dir: filepath.Join(c.dir, "api")}
	// The serving certificate for quantykube.kube-system.svc and its CA;
	// the objects it prints are those the chart's are held against
	// (TestChartMatchesDeployFiles).
	if _, err := c.QuantyKubeCLI(t, "apiservice", "--address", n.NSIP.String(), "--port", strconv.Itoa(a.Port),
		"--dir", a.Dir, "--store-user", storeUser); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(a.Dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	// The chart's external profile, as docs/helm.md installs it for a
	// store outside the cluster, with this store's address and CA.
	a.Manifests = renderChart(t, "quantykube", "kube-system", "-f", chartProfiles(t)["external"],
		"--set", "external.address="+n.NSIP.String(),
		"--set", "external.port="+strconv.Itoa(a.Port),
		"--set", "apiService.caBundle="+base64.StdEncoding.EncodeToString(ca),
		"--set", "rbac.storeSubject.kind=User",
		"--set", "rbac.storeSubject.name="+storeUser)
	cert, key, err := c.PKI.IssueClient("quantykube-store", storeUser)
	if err != nil {
		t.Fatal(err)
	}
	if a.reviewer, err = c.userKubeconfig("reviewer", cert, key); err != nil {
		t.Fatal(err)
	}
	return a
}

// serveArgs are QuantyKube's flags for it: the aggregated API, with the
// cluster's front-proxy CA, and a short retention rule for one namespace
// (the defaults for leases kept, as giving --retain-prefix replaces them).
func (a *AggregatedAPI) serveArgs(c *Cluster) []string {
	return []string{
		"--api-listen", net.JoinHostPort(a.Netns.NSIP.String(), strconv.Itoa(a.Port)),
		"--api-cert", filepath.Join(a.Dir, "apiserver.crt"),
		"--api-key", filepath.Join(a.Dir, "apiserver.key"),
		"--api-client-ca", c.PKI.FrontProxyCACert,
		"--api-kubeconfig", a.reviewer,
		"--retain-prefix", "/registry/leases/=10m",
		"--retain-prefix", "/registry/masterleases/=10m",
		"--retain-prefix", "/registry/configmaps/" + RetainedNamespace + "/=" + RetainedFor.String(),
		"--prune-interval", "2s",
	}
}

// APIServiceName names the aggregated API's APIService.
const APIServiceName = "v1alpha1.quanty.quantyroot.io"

// register applies the chart's objects, waits until the aggregator marks
// the APIService Available, and writes the retention check's ConfigMap.
func (a *AggregatedAPI) register(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a.apply(t, c)
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: RetainedNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := c.Kube.CoreV1().ConfigMaps(RetainedNamespace)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.retained.key = "/registry/configmaps/" + RetainedNamespace + "/old"
	if a.retained.first, err = strconv.ParseInt(cm.ResourceVersion, 10, 64); err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.retained.writtenAt = time.Now()
}

// apply applies the chart's objects and waits
// until the aggregator marks the APIService Available.
func (a *AggregatedAPI) apply(t testing.TB, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.KubectlIn(t, a.Manifests, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the aggregated API's objects: %v", err)
	}
	if err := waitAPIServiceAvailable(ctx, c, APIServiceName); err != nil {
		t.Fatal(err)
	}
}

// waitRetainedExpired waits until the first revision of the ConfigMap
// written under the short retention rule has left the window, and pruning
// (every 2 s) has run.
func (a *AggregatedAPI) waitRetainedExpired(t testing.TB) {
	r := a.retained
	if wait := time.Until(r.writtenAt.Add(RetainedFor + 10*time.Second)); wait > 0 {
		t.Logf("waiting %s for revision %d to leave the %s retention window", wait.Round(time.Second), r.first, RetainedFor)
		time.Sleep(wait)
	}
}

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

func waitAPIServiceAvailable(ctx context.Context, c *Cluster, name string) error {
	var last string
	for {
		obj, err := c.Dynamic.Resource(apiServices).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			for _, ci := range conds {
				cond, _ := ci.(map[string]any)
				if cond["type"] == "Available" {
					if cond["status"] == "True" {
						return nil
					}
					last = fmt.Sprint(cond["reason"], ": ", cond["message"])
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("APIService %s not Available: %s", name, last)
		case <-time.After(time.Second):
		}
	}
}

// userKubeconfig writes a kubeconfig for a client certificate of the
// cluster CA, as kubectl uses one.
func (c *Cluster) userKubeconfig(name, certFile, keyFile string) (string, error) {
	ca, err := os.ReadFile(c.PKI.CACert)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.server(), CertificateAuthorityData: ca}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	kc.CurrentContext = "e2e"
	path := filepath.Join(c.dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// User is a person with a client certificate and the roles a check binds.
type User struct {
	Name       string
	Kubeconfig string
	http       *http.Client
	server     string
}

// NewUser makes a user of the cluster CA in groups (and
// system:authenticated, which kube-apiserver adds).
func (c *Cluster) NewUser(t *testing.T, name string, groups ...string) *User {
	t.Helper()
	cert, key, err := c.PKI.IssueClient("user-"+name, name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := c.userKubeconfig("user-"+name, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &User{Name: name, Kubeconfig: kc, http: hc, server: c.server()}
}

// Bind gives u a ClusterRole: cluster-wide, or in namespace ns.
func (c *Cluster) Bind(t *testing.T, u *User, clusterRole, ns string) {
	t.Helper()
	ctx := c.Ctx(t)
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: u.Name}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole}
	name := u.Name + "-" + clusterRole
	var err error
	if ns == "" {
		_, err = c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj, RoleRef: ref}, metav1.CreateOptions{})
	} else {
		_, err = c.Kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subj, RoleRef: ref}, metav1.CreateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("bind %s to %s: %v", u.Name, clusterRole, err)
	}
	// kube-apiserver's authorizer learns the binding from its informers, a
	// moment after the write: a request sent at once may still be refused.
	// Wait until the binding grants what its role's first rule allows.
	role, err := c.Kube.RbacV1().ClusterRoles().Get(ctx, clusterRole, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("bind %s to %s: %v", u.Name, clusterRole, err)
	}
	var attrs *authorizationv1.ResourceAttributes
	for _, r := range role.Rules {
		if len(r.Verbs) > 0 && len(r.APIGroups) > 0 && len(r.Resources) > 0 {
			attrs = &authorizationv1.ResourceAttributes{Namespace: ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}
			break
		}
	}
	if attrs == nil {
		t.Fatalf("bind %s to %s: the role grants no resource to check the binding with", u.Name, clusterRole)
	}
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: u.Name, ResourceAttributes: attrs}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err := c.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bind %s to %s: %s %s/%s still not allowed after 30 s (%v)", u.Name, clusterRole, attrs.Verb, attrs.Group, attrs.Resource, err)
		}
	}
}

const apiBase = "/apis/quanty.quantyroot.io/v1alpha1"

// q is a History request as the q parameter.
func q(r *historypb.Request) string {
	b, err := proto.Marshal(r)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Do sends a request to kube-apiserver as u and returns the status and
// body.
func (u *User) Do(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.server+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := u.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, u.Name, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b.Bytes()
}

// Get answers a Get through the aggregated API as u.
func (u *User) Get(t *testing.T, r *historypb.Request) (int, *historypb.GetResponse, []byte) {
	t.Helper()
	code, b := u.Do(t, "GET", apiBase+"/objects?q="+q(r), nil)
	resp := &historypb.GetResponse{}
	if code == http.StatusOK {
		if err := proto.Unmarshal(b, resp); err != nil {
			t.Fatalf("a GetResponse: %v", err)
		}
	}
	return code, resp, b
}

// Log answers a Log through the aggregated API as u.
func (u *User) Log(t *testing.T, r *historypb.Request) (int, *historypb.LogResponse, []byte) {
	t.Helper()
	code, b := u.Do(t, "GET", apiBase+"/logs?q="+q(r), nil)
	resp := &historypb.LogResponse{}
	if code == http.StatusOK {
		if err := proto.Unmarshal(b, resp); err != nil {
			t.Fatalf("a LogResponse: %v", err)
		}
	}
	return code, resp, b
}

// Restore writes a key back through the aggregated API as u, with the
// request as a body without Content-Type, as `kubectl create --raw -f`.
func (u *User) Restore(t *testing.T, r *historypb.Request) (int, *historypb.RestoreResponse, []byte) {
	t.Helper()
	body, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	code, b := u.Do(t, "POST", apiBase+"/restores", body)
	resp := &historypb.RestoreResponse{}
	if code == http.StatusOK {
		if err := proto.Unmarshal(b, resp); err != nil {
			t.Fatalf("a RestoreResponse: %v", err)
		}
	}
	return code, resp, b
}

// auditLog is QuantyKube's log, where the aggregated API audits.
func (c *Cluster) auditLog() string { return c.QuantyKube.Log(0).String() }
