package e2e

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestBackupRestore runs docs/backup.md's SQLite commands under
// kube-apiserver: `quantykube backup` while it runs, more writes, then
// `quantykube restore` with everything stopped; kube-apiserver started
// again lists what it had when the backup was taken, at the same
// resourceVersions, and nothing written after it.
func TestBackupRestore(t *testing.T) {
	c := StartCluster(t, Options{Backend: framework.SQLite})
	ns, had := writeObjects(t, c)
	file := filepath.Join(t.TempDir(), "backup.db")
	if _, err := c.QuantyKubeCLI(t, "backup", "--endpoint", c.QuantyKube.DSN(), file); err != nil {
		t.Fatal(err)
	}
	ctx := c.Ctx(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-after-backup"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c.stopKubernetes(t)
	c.QuantyKube.Stop(t)
	if _, err := c.QuantyKubeCLI(t, "restore", "--endpoint", c.QuantyKube.DSN(), "--force", file); err != nil {
		t.Fatal(err)
	}
	c.QuantyKube.Start(t)
	c.startKubernetes(t)

	list, err := cms.List(c.Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list configmaps: %v", err)
	}
	got := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		got[cm.Name] = cm
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(had))) {
		t.Fatalf("after the restore: configmaps %v, at the backup: %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(had)))
	}
	for name, before := range had {
		if after := got[name]; after.ResourceVersion != before.ResourceVersion || !maps.Equal(after.Data, before.Data) {
			t.Errorf("%s: resourceVersion %s data %v; at the backup %s %v", name, after.ResourceVersion, after.Data, before.ResourceVersion, before.Data)
		}
	}
}
