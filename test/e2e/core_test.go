package e2e

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// checkVersion: kube-apiserver is the release built for the suite, through
// client-go's discovery and through `kubectl get --raw`.
func checkVersion(t *testing.T, c *Cluster) {
	v, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != KubernetesVersion {
		t.Errorf("discovery: gitVersion %q, want %q", v.GitVersion, KubernetesVersion)
	}
	out, err := c.Kubectl(t, "get", "--raw", "/version")
	if err != nil {
		t.Fatal(err)
	}
	var info version.Info
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatalf("kubectl get --raw /version: %v\n%s", err, out)
	}
	if info.GitVersion != KubernetesVersion {
		t.Errorf("kubectl get --raw /version: gitVersion %q, want %q", info.GitVersion, KubernetesVersion)
	}
}

// checkNamespaces: create, list (with the system namespaces) and update a
// namespace; the update gets a higher resourceVersion.
func checkNamespaces(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	nsc := c.Kube.CoreV1().Namespaces()
	ns := c.Namespace(t)
	list, err := nsc.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list namespaces: %v", err)
	}
	got := names(list.Items)
	for _, want := range []string{ns, "default", "kube-system"} {
		if !slices.Contains(got, want) {
			t.Errorf("namespace list %v lacks %s", got, want)
		}
	}
	obj, err := nsc.Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace: %v", err)
	}
	before := rv(t, obj)
	obj.Labels["e2e.quantykube.io/updated"] = "yes"
	upd, err := nsc.Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update namespace: %v", err)
	}
	if after := rv(t, upd); after <= before {
		t.Errorf("update: resourceVersion %d -> %d, want it to grow", before, after)
	}
	back, err := nsc.Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace: %v", err)
	}
	if back.Labels["e2e.quantykube.io/updated"] != "yes" || back.ResourceVersion != upd.ResourceVersion {
		t.Errorf("read back labels %v at %s, want the update at %s", back.Labels, back.ResourceVersion, upd.ResourceVersion)
	}
}

// checkConfigMaps: create, a second create (AlreadyExists), get, update,
// an update carrying a stale resourceVersion (Conflict, nothing written),
// server-side apply (and its field ownership), delete.
func checkConfigMaps(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm1"}, Data: map[string]string{"k": "v1", "other": "x"}}
	created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create cm1: %v", err)
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create of cm1: %v, want AlreadyExists", err)
	}
	got, err := cms.Get(ctx, "cm1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get cm1: %v", err)
	}
	if got.Data["k"] != "v1" || got.UID != created.UID || got.ResourceVersion != created.ResourceVersion {
		t.Errorf("get cm1: data %v uid %s rv %s, want k=v1 as created (uid %s rv %s)",
			got.Data, got.UID, got.ResourceVersion, created.UID, created.ResourceVersion)
	}

	stale := got.DeepCopy()
	got.Data["k"] = "v2"
	updated, err := cms.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update cm1: %v", err)
	}
	if rv(t, updated) <= rv(t, created) {
		t.Errorf("update: resourceVersion %s -> %s, want it to grow", created.ResourceVersion, updated.ResourceVersion)
	}
	stale.Data["k"] = "stale"
	if _, err := cms.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update with the stale resourceVersion %s: %v, want Conflict", stale.ResourceVersion, err)
	}
	got, err = cms.Get(ctx, "cm1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get cm1: %v", err)
	}
	if got.Data["k"] != "v2" || got.ResourceVersion != updated.ResourceVersion {
		t.Errorf("after the rejected stale write: k=%q at %s, want v2 at %s", got.Data["k"], got.ResourceVersion, updated.ResourceVersion)
	}

	apply := func(manager, value string, force bool) (*corev1.ConfigMap, error) {
		return cms.Apply(ctx, corev1ac.ConfigMap("cm-ssa", ns).WithData(map[string]string{"applied": value}),
			metav1.ApplyOptions{FieldManager: manager, Force: force})
	}
	ssa, err := apply("e2e", "yes", false)
	if err != nil {
		t.Fatalf("server-side apply of cm-ssa: %v", err)
	}
	if ssa.Data["applied"] != "yes" || !managedBy(ssa, "e2e") {
		t.Errorf("server-side apply: data %v, managers %v, want applied=yes owned by e2e", ssa.Data, ssa.ManagedFields)
	}
	if _, err := apply("e2e-other", "no", false); !apierrors.IsConflict(err) {
		t.Errorf("apply of a field another manager owns: %v, want Conflict", err)
	}
	if ssa, err = apply("e2e", "again", false); err != nil {
		t.Errorf("second apply by the owner: %v", err)
	} else if ssa.Data["applied"] != "again" {
		t.Errorf("second apply by the owner: data %v, want applied=again", ssa.Data)
	}

	if err := cms.Delete(ctx, "cm-ssa", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete cm-ssa: %v", err)
	}
	if _, err := cms.Get(ctx, "cm-ssa", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want NotFound", err)
	}
}

func managedBy(obj metav1.Object, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// checkSecrets: create, get (the value round-trips), list, update through
// stringData, delete.
func checkSecrets(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	secrets := c.Kube.CoreV1().Secrets(ns)
	for _, name := range []string{"s1", "s2"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"password": "hunter2-" + name}}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	s1, err := secrets.Get(ctx, "s1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get s1: %v", err)
	}
	if string(s1.Data["password"]) != "hunter2-s1" {
		t.Errorf("get s1: password %q, want hunter2-s1", s1.Data["password"])
	}
	list, err := secrets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list secrets: %v", err)
	}
	if got := names(list.Items); !slices.Contains(got, "s1") || !slices.Contains(got, "s2") {
		t.Errorf("secret list %v lacks s1 or s2", got)
	}
	s1.StringData = map[string]string{"password": "correct-horse"}
	if _, err := secrets.Update(ctx, s1, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update s1: %v", err)
	}
	if s1, err = secrets.Get(ctx, "s1", metav1.GetOptions{}); err != nil {
		t.Fatalf("get s1: %v", err)
	}
	if string(s1.Data["password"]) != "correct-horse" {
		t.Errorf("s1 after the update: password %q, want correct-horse", s1.Data["password"])
	}
	if err := secrets.Delete(ctx, "s2", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete s2: %v", err)
	}
	if _, err := secrets.Get(ctx, "s2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get s2 after delete: %v, want NotFound", err)
	}
}
