package e2e

import (
	"path/filepath"
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

	sameConfigMaps(t, listConfigMaps(t, c, ns), had, "at the backup")
}
