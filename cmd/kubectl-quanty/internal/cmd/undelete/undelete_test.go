package undelete

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/deleted"
	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func newCluster(t *testing.T) *cmdtesting.Cluster {
	return cmdtesting.New(t, NewCmdUndelete, deleted.NewCmdDeleted)
}

func newClusterOn(t *testing.T, o mvcc.Options) *cmdtesting.Cluster {
	return cmdtesting.NewOn(t, o, NewCmdUndelete, deleted.NewCmdDeleted)
}

// shop is a namespace with a bit of everything, as kube-apiserver stores
// it: key -> value.
type shopObject struct {
	key   string
	value []byte
}

func shopObjects(t *testing.T) []shopObject {
	tm := func(kind, apiVersion string) metav1.TypeMeta {
		return metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}
	}
	pb := func(key string, obj runtime.Object) shopObject { return shopObject{key, cmdtesting.Encode(t, obj)} }
	widget, err := json.Marshal(map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "blue", "namespace": "shop", "uid": "uid-widget"}, "spec": map[string]any{"size": 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	return []shopObject{
		pb("/registry/deployments/shop/web", &appsv1.Deployment{TypeMeta: tm("Deployment", "apps/v1"), ObjectMeta: cmdtesting.Meta("shop", "web", "uid-deploy"),
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels}}}),
		pb("/registry/replicasets/shop/web-5d8", &appsv1.ReplicaSet{TypeMeta: tm("ReplicaSet", "apps/v1"),
			ObjectMeta: cmdtesting.Meta("shop", "web-5d8", "uid-rs", cmdtesting.ControlledBy("Deployment", "apps/v1", "web", "uid-deploy"))}),
		pb("/registry/pods/shop/web-5d8-x", &corev1.Pod{TypeMeta: tm("Pod", "v1"),
			ObjectMeta: cmdtesting.Meta("shop", "web-5d8-x", "uid-pod", cmdtesting.ControlledBy("ReplicaSet", "apps/v1", "web-5d8", "uid-rs"))}),
		pb("/registry/pods/shop/debug", &corev1.Pod{TypeMeta: tm("Pod", "v1"), ObjectMeta: cmdtesting.Meta("shop", "debug", "uid-debug")}),
		pb("/registry/services/specs/shop/web", &corev1.Service{TypeMeta: tm("Service", "v1"), ObjectMeta: cmdtesting.Meta("shop", "web", "uid-svc")}),
		//lint:ignore SA1019 kube-apiserver still stores Endpoints, and the endpoints controller still writes them.
		pb("/registry/services/endpoints/shop/web", &corev1.Endpoints{TypeMeta: tm("Endpoints", "v1"), ObjectMeta: cmdtesting.Meta("shop", "web", "uid-ep")}),
		pb("/registry/endpointslices/shop/web-abcde", &discoveryv1.EndpointSlice{TypeMeta: tm("EndpointSlice", "discovery.k8s.io/v1"),
			ObjectMeta: cmdtesting.Meta("shop", "web-abcde", "uid-eps", cmdtesting.ControlledBy("Service", "v1", "web", "uid-svc")), AddressType: discoveryv1.AddressTypeIPv4}),
		pb("/registry/configmaps/shop/web", cmdtesting.ConfigMap("shop", "web", "uid-cm", map[string]string{"color": "blue"})),
		pb("/registry/configmaps/shop/kube-root-ca.crt", cmdtesting.ConfigMap("shop", "kube-root-ca.crt", "uid-ca", nil)),
		pb("/registry/secrets/shop/db", &corev1.Secret{TypeMeta: tm("Secret", "v1"), ObjectMeta: cmdtesting.Meta("shop", "db", "uid-db"), Data: map[string][]byte{"password": []byte("hunter2")}}),
		pb("/registry/secrets/shop/app-token", &corev1.Secret{TypeMeta: tm("Secret", "v1"), ObjectMeta: cmdtesting.Meta("shop", "app-token", "uid-tok"), Type: corev1.SecretTypeServiceAccountToken}),
		{"/registry/secrets/shop/sealed", []byte("k8s:enc:aescbc:v1:key1:\x8f\x00\x13ciphertext")},
		pb("/registry/serviceaccounts/shop/default", &corev1.ServiceAccount{TypeMeta: tm("ServiceAccount", "v1"), ObjectMeta: cmdtesting.Meta("shop", "default", "uid-sa0")}),
		pb("/registry/serviceaccounts/shop/app", &corev1.ServiceAccount{TypeMeta: tm("ServiceAccount", "v1"), ObjectMeta: cmdtesting.Meta("shop", "app", "uid-sa")}),
		pb("/registry/rolebindings/shop/app", &rbacv1.RoleBinding{TypeMeta: tm("RoleBinding", "rbac.authorization.k8s.io/v1"), ObjectMeta: cmdtesting.Meta("shop", "app", "uid-rb"),
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "app"}}),
		pb("/registry/roles/shop/app", &rbacv1.Role{TypeMeta: tm("Role", "rbac.authorization.k8s.io/v1"), ObjectMeta: cmdtesting.Meta("shop", "app", "uid-role")}),
		{"/registry/example.com/widgets/shop/blue", widget},
		pb("/registry/events/shop/web.1", &corev1.Event{TypeMeta: tm("Event", "v1"), ObjectMeta: cmdtesting.Meta("shop", "web.1", "uid-ev")}),
	}
}

// A namespace deleted as kube-apiserver and the namespace controller
// delete one comes back with its objects, in order, as they were before
// the deletion began; what controllers recreate is skipped and named.
func TestUndeleteNamespace(t *testing.T) {
	c := newCluster(t)
	nsKey := "/registry/namespaces/shop"
	nsBefore := cmdtesting.Encode(t, cmdtesting.Namespace(false, "kubernetes"))
	nsRev := c.Put(nsKey, nsBefore)
	objects := shopObjects(t)
	for _, o := range objects {
		c.Put(o.key, o.value)
	}
	gone := "/registry/configmaps/shop/gone-before"
	c.Put(gone, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "gone-before", "uid-gone", nil)))
	c.Del(gone)
	// The deletion: marked, the pods terminating, everything deleted, the
	// finalizer removed, the namespace deleted.
	began := c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(true, "kubernetes")))
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: cmdtesting.Meta("shop", "debug", "uid-debug")}
	pod.DeletionTimestamp = ptr.To(metav1.NewTime(cmdtesting.Created.Add(3600e9)))
	c.Put("/registry/pods/shop/debug", cmdtesting.Encode(t, pod))
	for _, o := range objects {
		c.Del(o.key)
	}
	c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(true)))
	deletedAt := c.Del(nsKey)

	// deleted lists what is gone, with the revision to restore.
	out := c.OK("deleted")
	for _, want := range []string{"configmap/web", "deployment.apps/web", "widget.example.com/blue", "secret/sealed", "configmap/gone-before"} {
		if !strings.Contains(out, want) {
			t.Errorf("deleted: no %s in\n%s", want, out)
		}
	}
	if strings.Contains(out, "event/") || strings.Contains(out, "namespace/") {
		t.Errorf("deleted lists events or namespaces without -A:\n%s", out)
	}
	var doc struct{ Deleted []deleted.Row }
	if err := json.Unmarshal([]byte(c.OK("deleted", "pods", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Deleted {
		if r.Name == "debug" && (r.LastRevision <= r.RestoreRevision || r.RestoreRevision >= began) {
			t.Errorf("pod debug: last revision %d (being deleted), restore revision %d, want the one before %d", r.LastRevision, r.RestoreRevision, began)
		}
	}
	if len(doc.Deleted) != 2 {
		t.Errorf("deleted pods -o json = %+v", doc.Deleted)
	}
	if out := c.OK("deleted", "-A"); !cmdtesting.HasLine(fmt.Sprintf(`(?m)^-\s+namespace/shop\s.*\s%d\s+%d$`, deletedAt-1, nsRev), out) {
		t.Errorf("deleted -A:\n%s", out)
	}

	// A dry run lists exactly what it would write, and writes nothing.
	code, out, errOut := c.Run("", "undelete", "namespace", "shop", "--dry-run")
	if code != 0 {
		t.Fatalf("undelete --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	wantOrder := []string{"namespace/shop", "role.rbac.authorization.k8s.io/app", "rolebinding.rbac.authorization.k8s.io/app", "serviceaccount/app",
		"configmap/web", "secret/db", "secret/sealed", "service/web", "widget.example.com/blue", "deployment.apps/web", "pod/debug"}
	var planned []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.Contains(l, "would create it as it was at revision "+fmt.Sprint(began-1)) {
			t.Errorf("dry run line %q", l)
		}
		planned = append(planned, strings.TrimSuffix(strings.Fields(l)[0], ":"))
	}
	if !slices.Equal(planned, wantOrder) {
		t.Errorf("dry run plans\n%q\nwant\n%q", planned, wantOrder)
	}
	for obj, why := range map[string]string{
		"replicaset.apps/web-5d8":                  "its controller recreates it (owner Deployment/web)",
		"pod/web-5d8-x":                            "its controller recreates it (owner ReplicaSet/web-5d8)",
		"endpointslice.discovery.k8s.io/web-abcde": "its controller recreates it (owner Service/web)",
		"endpoints/web":                            "the endpoints controller recreates it",
		"secret/app-token":                         "a ServiceAccount token",
		"configmap/kube-root-ca.crt":               "publishes it in every namespace",
		"serviceaccount/default":                   "creates it in every namespace",
	} {
		if !cmdtesting.HasLine(`(?m)^  -\s+`+regexp.QuoteMeta(obj)+`\s+.*`+regexp.QuoteMeta(why), errOut) {
			t.Errorf("dry run does not skip %s saying %q:\n%s", obj, why, errOut)
		}
	}
	if v, _ := c.Value(nsKey); v != nil {
		t.Fatal("the dry run wrote the namespace")
	}

	// The real thing.
	out = c.OK("undelete", "namespace", "shop", "--yes")
	if v, _ := c.Value(nsKey); string(v) != string(nsBefore) {
		t.Fatal("the namespace is not back as it was before its deletion began")
	}
	last := int64(0)
	byKey := map[string][]byte{}
	for _, o := range objects {
		byKey[o.key] = o.value
	}
	restoredKeys := []string{nsKey, "/registry/roles/shop/app", "/registry/rolebindings/shop/app", "/registry/serviceaccounts/shop/app",
		"/registry/configmaps/shop/web", "/registry/secrets/shop/db", "/registry/secrets/shop/sealed", "/registry/services/specs/shop/web",
		"/registry/example.com/widgets/shop/blue", "/registry/deployments/shop/web", "/registry/pods/shop/debug"}
	for _, k := range restoredKeys {
		v, rev := c.Value(k)
		if v == nil || rev <= last || (k != nsKey && string(v) != string(byKey[k])) {
			t.Errorf("%s: restored %v at revision %d (after %d), same value %v", k, v != nil, rev, last, string(v) == string(byKey[k]))
		}
		last = rev
	}
	for _, k := range []string{"/registry/replicasets/shop/web-5d8", "/registry/pods/shop/web-5d8-x", "/registry/services/endpoints/shop/web",
		"/registry/endpointslices/shop/web-abcde", "/registry/secrets/shop/app-token", "/registry/configmaps/shop/kube-root-ca.crt",
		"/registry/serviceaccounts/shop/default", "/registry/events/shop/web.1", gone} {
		if v, _ := c.Value(k); v != nil {
			t.Errorf("%s was restored", k)
		}
	}
	if !strings.Contains(out, "deployment.apps/web restored to revision") {
		t.Errorf("undelete printed:\n%s", out)
	}
	if code, _, errOut := c.Run("", "undelete", "namespace", "shop", "--yes"); code == 0 || !strings.Contains(errOut, "namespace shop is not deleted: it exists") {
		t.Errorf("undelete of a namespace that exists: exit %d\n%s", code, errOut)
	}
}

// undelete writes only where an object is still gone, as it listed it:
// an object created again while the question was on the screen is left
// as it is, and named; a namespace created again stops it.
func TestUndeleteCreatedAgain(t *testing.T) {
	c := newCluster(t)
	nsKey, cmKey, secretKey := "/registry/namespaces/shop", "/registry/configmaps/shop/web", "/registry/secrets/shop/db"
	nsBefore := cmdtesting.Encode(t, cmdtesting.Namespace(false))
	c.Put(nsKey, nsBefore)
	c.Put(cmKey, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "web", "uid-cm", map[string]string{"color": "blue"})))
	secret := cmdtesting.Encode(t, &corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"}, ObjectMeta: cmdtesting.Meta("shop", "db", "uid-db")})
	c.Put(secretKey, secret)
	// As the namespace controller deletes: marked, emptied, deleted.
	deleteAll := func() {
		c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(true)))
		c.Del(cmKey)
		c.Del(secretKey)
		c.Del(nsKey)
	}
	deleteAll()

	cmAgain := cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "web", "uid-cm-2", map[string]string{"color": "red"}))
	put := &cmdtesting.AnswerAfter{Change: func() { c.Put(cmKey, cmAgain) }, Answer: strings.NewReader("y\n")}
	code, out, errOut := c.RunIn(put, "undelete", "namespace", "shop")
	if code == 0 || !strings.Contains(errOut, "error: restoring configmap/web: created again since the list above, so not overwritten") ||
		!strings.Contains(errOut, "1 of 2 objects were not restored") {
		t.Fatalf("undelete with a ConfigMap created during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	for key, want := range map[string][]byte{nsKey: nsBefore, cmKey: cmAgain, secretKey: secret} {
		if v, _ := c.Value(key); !bytes.Equal(v, want) {
			t.Errorf("%s is not as the undelete should leave it", key)
		}
	}

	deleteAll()
	nsAgain := cmdtesting.Encode(t, &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: cmdtesting.Meta("", "shop", "uid-ns-2")})
	put = &cmdtesting.AnswerAfter{Change: func() { c.Put(nsKey, nsAgain) }, Answer: strings.NewReader("y\n")}
	code, out, errOut = c.RunIn(put, "undelete", "namespace", "shop")
	if code == 0 || !strings.Contains(errOut, "restoring namespace shop: created again since the list above, so not overwritten") {
		t.Fatalf("undelete of a namespace created during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.Value(nsKey); !bytes.Equal(v, nsAgain) {
		t.Fatal("undelete overwrote the namespace created during the question")
	}
	if v, _ := c.Value(secretKey); v != nil {
		t.Fatal("undelete went on after the namespace")
	}
}

// A resource kept for less than the rest (leases, by QuantyKube's
// defaults) whose window has moved past what is asked: deleted --since an
// hour reads all that is retained of it, and undelete brings back the
// rest, naming it as not read.
func TestShortRetention(t *testing.T) {
	var ahead atomic.Int64 // how far the store's clock runs ahead of the plugin's
	c := newClusterOn(t, mvcc.Options{
		Now:            func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
		RetainPrefixes: []mvcc.RetentionRule{{Prefix: []byte("/registry/leases/"), Retain: mvcc.MinRetain}},
		PruneInterval:  time.Hour, // the test prunes
	})
	nsKey, cmKey, leaseKey := "/registry/namespaces/shop", "/registry/configmaps/shop/web", "/registry/leases/shop/lock"
	c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(false, "kubernetes")))
	c.Put(cmKey, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "web", "uid-cm", map[string]string{"color": "blue"})))
	c.Put(leaseKey, cmdtesting.Encode(t, &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"}, ObjectMeta: cmdtesting.Meta("shop", "lock", "uid-lease")}))
	c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(true, "kubernetes")))
	c.Del(cmKey)
	c.Del(leaseKey)
	c.Del(nsKey)
	// Two minutes on, the leases' window starts after all of it.
	ahead.Store(int64(2 * time.Minute))
	c.Put("/registry/configmaps/default/later", cmdtesting.Encode(t, cmdtesting.ConfigMap("default", "later", "uid-later", nil)))
	if _, err := c.Store.Prune(t.Context()); err != nil {
		t.Fatal(err)
	}

	out := c.OK("deleted", "-A", "--since", "1h")
	if !regexp.MustCompile(`(?m)^shop +configmap/web `).MatchString(out) || !regexp.MustCompile(`(?m)^- +namespace/shop `).MatchString(out) {
		t.Errorf("deleted -A --since 1h:\n%s", out)
	}
	code, out, errOut := c.Run("", "undelete", "namespace", "shop", "--yes")
	if code != 0 || !strings.Contains(out, "configmap/web restored to revision") ||
		!regexp.MustCompile(`Not read \(so not restored\): leases\.coordination\.k8s\.io: outside the history QuantyKube retains`).MatchString(errOut) {
		t.Fatalf("undelete: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.Value(cmKey); v == nil {
		t.Error("undelete did not bring the ConfigMap back")
	}
}
