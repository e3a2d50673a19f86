package main

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

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func meta(ns, name, uid string, owners ...metav1.OwnerReference) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), CreationTimestamp: created, OwnerReferences: owners}
}

func controlledBy(kind, apiVersion, name, uid string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}
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
	pb := func(key string, obj runtime.Object) shopObject { return shopObject{key, encode(t, obj)} }
	widget, err := json.Marshal(map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "blue", "namespace": "shop", "uid": "uid-widget"}, "spec": map[string]any{"size": 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	return []shopObject{
		pb("/registry/deployments/shop/web", &appsv1.Deployment{TypeMeta: tm("Deployment", "apps/v1"), ObjectMeta: meta("shop", "web", "uid-deploy"),
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels}}}),
		pb("/registry/replicasets/shop/web-5d8", &appsv1.ReplicaSet{TypeMeta: tm("ReplicaSet", "apps/v1"),
			ObjectMeta: meta("shop", "web-5d8", "uid-rs", controlledBy("Deployment", "apps/v1", "web", "uid-deploy"))}),
		pb("/registry/pods/shop/web-5d8-x", &corev1.Pod{TypeMeta: tm("Pod", "v1"),
			ObjectMeta: meta("shop", "web-5d8-x", "uid-pod", controlledBy("ReplicaSet", "apps/v1", "web-5d8", "uid-rs"))}),
		pb("/registry/pods/shop/debug", &corev1.Pod{TypeMeta: tm("Pod", "v1"), ObjectMeta: meta("shop", "debug", "uid-debug")}),
		pb("/registry/services/specs/shop/web", &corev1.Service{TypeMeta: tm("Service", "v1"), ObjectMeta: meta("shop", "web", "uid-svc")}),
		//lint:ignore SA1019 kube-apiserver still stores Endpoints, and the endpoints controller still writes them.
		pb("/registry/services/endpoints/shop/web", &corev1.Endpoints{TypeMeta: tm("Endpoints", "v1"), ObjectMeta: meta("shop", "web", "uid-ep")}),
		pb("/registry/endpointslices/shop/web-abcde", &discoveryv1.EndpointSlice{TypeMeta: tm("EndpointSlice", "discovery.k8s.io/v1"),
			ObjectMeta: meta("shop", "web-abcde", "uid-eps", controlledBy("Service", "v1", "web", "uid-svc")), AddressType: discoveryv1.AddressTypeIPv4}),
		pb("/registry/configmaps/shop/web", configMap("shop", "web", "uid-cm", map[string]string{"color": "blue"})),
		pb("/registry/configmaps/shop/kube-root-ca.crt", configMap("shop", "kube-root-ca.crt", "uid-ca", nil)),
		pb("/registry/secrets/shop/db", &corev1.Secret{TypeMeta: tm("Secret", "v1"), ObjectMeta: meta("shop", "db", "uid-db"), Data: map[string][]byte{"password": []byte("hunter2")}}),
		pb("/registry/secrets/shop/app-token", &corev1.Secret{TypeMeta: tm("Secret", "v1"), ObjectMeta: meta("shop", "app-token", "uid-tok"), Type: corev1.SecretTypeServiceAccountToken}),
		{"/registry/secrets/shop/sealed", []byte("k8s:enc:aescbc:v1:key1:\x8f\x00\x13ciphertext")},
		pb("/registry/serviceaccounts/shop/default", &corev1.ServiceAccount{TypeMeta: tm("ServiceAccount", "v1"), ObjectMeta: meta("shop", "default", "uid-sa0")}),
		pb("/registry/serviceaccounts/shop/app", &corev1.ServiceAccount{TypeMeta: tm("ServiceAccount", "v1"), ObjectMeta: meta("shop", "app", "uid-sa")}),
		pb("/registry/rolebindings/shop/app", &rbacv1.RoleBinding{TypeMeta: tm("RoleBinding", "rbac.authorization.k8s.io/v1"), ObjectMeta: meta("shop", "app", "uid-rb"),
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "app"}}),
		pb("/registry/roles/shop/app", &rbacv1.Role{TypeMeta: tm("Role", "rbac.authorization.k8s.io/v1"), ObjectMeta: meta("shop", "app", "uid-role")}),
		{"/registry/example.com/widgets/shop/blue", widget},
		pb("/registry/events/shop/web.1", &corev1.Event{TypeMeta: tm("Event", "v1"), ObjectMeta: meta("shop", "web.1", "uid-ev")}),
	}
}

func namespace(deleting bool, finalizers ...corev1.FinalizerName) *corev1.Namespace {
	n := &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: meta("", "shop", "uid-ns"),
		Spec: corev1.NamespaceSpec{Finalizers: finalizers}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	if deleting {
		n.DeletionTimestamp = ptr.To(metav1.NewTime(created.Add(3600e9)))
		n.Status.Phase = corev1.NamespaceTerminating
	}
	return n
}

// A namespace deleted as kube-apiserver and the namespace controller
// delete one comes back with its objects, in order, as they were before
// the deletion began; what controllers recreate is skipped and named.
func TestUndeleteNamespace(t *testing.T) {
	c := newCluster(t)
	nsKey := "/registry/namespaces/shop"
	nsBefore := encode(t, namespace(false, "kubernetes"))
	nsRev := c.put(nsKey, nsBefore)
	objects := shopObjects(t)
	for _, o := range objects {
		c.put(o.key, o.value)
	}
	gone := "/registry/configmaps/shop/gone-before"
	c.put(gone, encode(t, configMap("shop", "gone-before", "uid-gone", nil)))
	c.del(gone)
	// The deletion: marked, the pods terminating, everything deleted, the
	// finalizer removed, the namespace deleted.
	began := c.put(nsKey, encode(t, namespace(true, "kubernetes")))
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: meta("shop", "debug", "uid-debug")}
	pod.DeletionTimestamp = ptr.To(metav1.NewTime(created.Add(3600e9)))
	c.put("/registry/pods/shop/debug", encode(t, pod))
	for _, o := range objects {
		c.del(o.key)
	}
	c.put(nsKey, encode(t, namespace(true)))
	deletedAt := c.del(nsKey)

	// deleted lists what is gone, with the revision to restore.
	out := c.ok("deleted")
	for _, want := range []string{"configmap/web", "deployment.apps/web", "widget.example.com/blue", "secret/sealed", "configmap/gone-before"} {
		if !strings.Contains(out, want) {
			t.Errorf("deleted: no %s in\n%s", want, out)
		}
	}
	if strings.Contains(out, "event/") || strings.Contains(out, "namespace/") {
		t.Errorf("deleted lists events or namespaces without -A:\n%s", out)
	}
	var doc struct{ Deleted []deletedRow }
	if err := json.Unmarshal([]byte(c.ok("deleted", "pods", "-o", "json")), &doc); err != nil {
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
	if out := c.ok("deleted", "-A"); !hasLine(fmt.Sprintf(`(?m)^-\s+namespace/shop\s.*\s%d\s+%d$`, deletedAt-1, nsRev), out) {
		t.Errorf("deleted -A:\n%s", out)
	}

	// A dry run lists exactly what it would write, and writes nothing.
	code, out, errOut := c.run("", "undelete", "namespace", "shop", "--dry-run")
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
		if !hasLine(`(?m)^  -\s+`+regexp.QuoteMeta(obj)+`\s+.*`+regexp.QuoteMeta(why), errOut) {
			t.Errorf("dry run does not skip %s saying %q:\n%s", obj, why, errOut)
		}
	}
	if v, _ := c.value(nsKey); v != nil {
		t.Fatal("the dry run wrote the namespace")
	}

	// The real thing.
	out = c.ok("undelete", "namespace", "shop", "--yes")
	if v, _ := c.value(nsKey); string(v) != string(nsBefore) {
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
		v, rev := c.value(k)
		if v == nil || rev <= last || (k != nsKey && string(v) != string(byKey[k])) {
			t.Errorf("%s: restored %v at revision %d (after %d), same value %v", k, v != nil, rev, last, string(v) == string(byKey[k]))
		}
		last = rev
	}
	for _, k := range []string{"/registry/replicasets/shop/web-5d8", "/registry/pods/shop/web-5d8-x", "/registry/services/endpoints/shop/web",
		"/registry/endpointslices/shop/web-abcde", "/registry/secrets/shop/app-token", "/registry/configmaps/shop/kube-root-ca.crt",
		"/registry/serviceaccounts/shop/default", "/registry/events/shop/web.1", gone} {
		if v, _ := c.value(k); v != nil {
			t.Errorf("%s was restored", k)
		}
	}
	if !strings.Contains(out, "deployment.apps/web restored to revision") {
		t.Errorf("undelete printed:\n%s", out)
	}
	if code, _, errOut := c.run("", "undelete", "namespace", "shop", "--yes"); code == 0 || !strings.Contains(errOut, "namespace shop is not deleted: it exists") {
		t.Errorf("undelete of a namespace that exists: exit %d\n%s", code, errOut)
	}
}

// undelete writes only where an object is still gone, as it listed it:
// an object created again while the question was on the screen is left
// as it is, and named; a namespace created again stops it.
func TestUndeleteCreatedAgain(t *testing.T) {
	c := newCluster(t)
	nsKey, cmKey, secretKey := "/registry/namespaces/shop", "/registry/configmaps/shop/web", "/registry/secrets/shop/db"
	nsBefore := encode(t, namespace(false))
	c.put(nsKey, nsBefore)
	c.put(cmKey, encode(t, configMap("shop", "web", "uid-cm", map[string]string{"color": "blue"})))
	secret := encode(t, &corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"}, ObjectMeta: meta("shop", "db", "uid-db")})
	c.put(secretKey, secret)
	// As the namespace controller deletes: marked, emptied, deleted.
	deleteAll := func() {
		c.put(nsKey, encode(t, namespace(true)))
		c.del(cmKey)
		c.del(secretKey)
		c.del(nsKey)
	}
	deleteAll()

	cmAgain := encode(t, configMap("shop", "web", "uid-cm-2", map[string]string{"color": "red"}))
	put := &answerAfter{change: func() { c.put(cmKey, cmAgain) }, answer: strings.NewReader("y\n")}
	code, out, errOut := c.runIn(put, "undelete", "namespace", "shop")
	if code == 0 || !strings.Contains(errOut, "error: restoring configmap/web: created again since the list above, so not overwritten") ||
		!strings.Contains(errOut, "1 of 2 objects were not restored") {
		t.Fatalf("undelete with a ConfigMap created during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	for key, want := range map[string][]byte{nsKey: nsBefore, cmKey: cmAgain, secretKey: secret} {
		if v, _ := c.value(key); !bytes.Equal(v, want) {
			t.Errorf("%s is not as the undelete should leave it", key)
		}
	}

	deleteAll()
	nsAgain := encode(t, &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: meta("", "shop", "uid-ns-2")})
	put = &answerAfter{change: func() { c.put(nsKey, nsAgain) }, answer: strings.NewReader("y\n")}
	code, out, errOut = c.runIn(put, "undelete", "namespace", "shop")
	if code == 0 || !strings.Contains(errOut, "restoring namespace shop: created again since the list above, so not overwritten") {
		t.Fatalf("undelete of a namespace created during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.value(nsKey); !bytes.Equal(v, nsAgain) {
		t.Fatal("undelete overwrote the namespace created during the question")
	}
	if v, _ := c.value(secretKey); v != nil {
		t.Fatal("undelete went on after the namespace")
	}
}

// hasLine reports whether s has a match of re.
func hasLine(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

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
	c.put(nsKey, encode(t, namespace(false, "kubernetes")))
	c.put(cmKey, encode(t, configMap("shop", "web", "uid-cm", map[string]string{"color": "blue"})))
	c.put(leaseKey, encode(t, &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"}, ObjectMeta: meta("shop", "lock", "uid-lease")}))
	c.put(nsKey, encode(t, namespace(true, "kubernetes")))
	c.del(cmKey)
	c.del(leaseKey)
	c.del(nsKey)
	// Two minutes on, the leases' window starts after all of it.
	ahead.Store(int64(2 * time.Minute))
	c.put("/registry/configmaps/default/later", encode(t, configMap("default", "later", "uid-later", nil)))
	if _, err := c.store.Prune(t.Context()); err != nil {
		t.Fatal(err)
	}

	out := c.ok("deleted", "-A", "--since", "1h")
	if !regexp.MustCompile(`(?m)^shop +configmap/web `).MatchString(out) || !regexp.MustCompile(`(?m)^- +namespace/shop `).MatchString(out) {
		t.Errorf("deleted -A --since 1h:\n%s", out)
	}
	code, out, errOut := c.run("", "undelete", "namespace", "shop", "--yes")
	if code != 0 || !strings.Contains(out, "configmap/web restored to revision") ||
		!regexp.MustCompile(`Not read \(so not restored\): leases\.coordination\.k8s\.io: outside the history QuantyKube retains`).MatchString(errOut) {
		t.Fatalf("undelete: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.value(cmKey); v == nil {
		t.Error("undelete did not bring the ConfigMap back")
	}
}
