package e2e

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestImport moves a cluster in (docs/import.md): kube-apiserver writes
// objects to etcd (or to kine, as k3s runs it), stops, `quantykube import`
// copies the datastore into an empty QuantyKube store, and kube-apiserver
// started again on QuantyKube lists every object it had, with its content
// and resourceVersion; a list at the import's revision is served, one
// before it is "too old" (410), and the next write takes a later
// resourceVersion.
func TestImport(t *testing.T) {
	sources := []struct {
		name   string
		target framework.Backend
		start  func(t *testing.T) *framework.Target
	}{
		{"etcd-to-sqlite", framework.SQLite, func(t *testing.T) *framework.Target {
			return framework.Start(t, framework.Etcd, framework.Options{})
		}},
		{"kine-to-postgres", framework.Postgres, func(t *testing.T) *framework.Target {
			return framework.StartKine(t, "sqlite://"+filepath.Join(t.TempDir(), "state.db"))
		}},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			source := src.start(t)
			c := StartCluster(t, Options{Backend: src.target, Datastore: source})
			ns, had := writeObjects(t, c)

			c.stopKubernetes(t)
			target := framework.Start(t, src.target, framework.Options{Process: true})
			target.Stop(t)
			from := source.Endpoint()
			if source.Backend() == framework.Kine {
				source.Stop(t)
				from = source.DSN()
			}
			out, err := c.QuantyKubeCLI(t, "import", "--from", from, "--endpoint", target.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("quantykube import:\n%s", out)
			if source.Backend() == framework.Etcd {
				source.Stop(t)
			}
			target.Start(t)
			c.QuantyKube = target
			// kube-apiserver stops before its new datastore does.
			t.Cleanup(func() { c.stopKubernetes(t) })
			c.startKubernetes(t)

			ctx := c.Ctx(t)
			cms := c.Kube.CoreV1().ConfigMaps(ns)
			sameConfigMaps(t, listConfigMaps(t, c, ns), had, "before the import")
			if _, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, "e2e-import-secret", metav1.GetOptions{}); err != nil {
				t.Errorf("the secret: %v", err)
			}
			imported := importedRevision(t, out)
			exact := metav1.ListOptions{ResourceVersion: strconv.FormatInt(imported, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact}
			if l, err := cms.List(ctx, exact); err != nil || len(l.Items) != len(had) {
				t.Errorf("list at the imported revision %d: %v", imported, err)
			}
			exact.ResourceVersion = strconv.FormatInt(imported-1, 10)
			if _, err := cms.List(ctx, exact); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				t.Errorf("list before the imported revision: %v, want 410 Gone (too old)", err)
			}
			created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-after-import"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create after the import: %v", err)
			}
			if rv(t, created) <= imported {
				t.Errorf("a write after the import got resourceVersion %s, not after the imported revision %d", created.ResourceVersion, imported)
			}
		})
	}
}

// writeObjects makes a namespace's worth of history through kube-apiserver:
// configmaps created, updated and deleted, and a secret. It returns the
// namespace and the configmaps as they are at the end.
func writeObjects(t *testing.T, c *Cluster) (string, map[string]corev1.ConfigMap) {
	ctx := c.Ctx(t)
	// Not c.Namespace: its cleanup would run after kube-apiserver stops.
	nsObj, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-import-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	ns := nsObj.Name
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	for i := range 5 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e2e-import-%d", i)}, Data: map[string]string{"v": "0"}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create configmap: %v", err)
		}
	}
	for v := 1; v <= 2; v++ {
		for i := range 3 {
			cm, err := cms.Get(ctx, fmt.Sprintf("e2e-import-%d", i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cm.Data["v"] = strconv.Itoa(v)
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("update configmap: %v", err)
			}
		}
	}
	if err := cms.Delete(ctx, "e2e-import-4", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete configmap: %v", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-import-secret"}, StringData: map[string]string{"k": "v"}}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	return ns, listConfigMaps(t, c, ns)
}

// listConfigMaps is ns's configmaps by name.
func listConfigMaps(t *testing.T, c *Cluster, ns string) map[string]corev1.ConfigMap {
	t.Helper()
	list, err := c.Kube.CoreV1().ConfigMaps(ns).List(c.Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list configmaps: %v", err)
	}
	byName := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		byName[cm.Name] = cm
	}
	return byName
}

// sameConfigMaps asserts that got are the configmaps of want (as they were
// when), with the same uid, resourceVersion and data.
func sameConfigMaps(t *testing.T, got, want map[string]corev1.ConfigMap, when string) {
	t.Helper()
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
		t.Fatalf("configmaps %v; %s: %v", g, when, w)
	}
	for name, before := range want {
		after := got[name]
		if after.ResourceVersion != before.ResourceVersion || !maps.Equal(after.Data, before.Data) || after.UID != before.UID {
			t.Errorf("%s: resourceVersion %s uid %s data %v; %s: %s %s %v", name, after.ResourceVersion, after.UID, after.Data, when, before.ResourceVersion, before.UID, before.Data)
		}
	}
}

// importedRevision reads the revision from import's report.
func importedRevision(t *testing.T, report []byte) int64 {
	t.Helper()
	for _, line := range strings.Split(string(report), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "revision"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Fatal(errors.New("the import's report has no revision"))
	return 0
}
