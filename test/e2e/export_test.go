package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestExportToEtcd moves a cluster out (docs/OPERATIONS.md, "Leaving for
// etcd"): kube-apiserver writes objects to QuantyKube, stops, `quantykube
// export --etcd-snapshot` writes the store as an etcd snapshot, etcdutl
// v3.6.16 restores it, and kube-apiserver started again on etcd v3.6.16
// lists every object it had, with its content and resourceVersion; a
// list at the export's revision is served, one before it is "too old"
// (410), and the next write takes a later resourceVersion.
func TestExportToEtcd(t *testing.T) {
	etcdutl, err := framework.EtcdutlBinary()
	if err != nil {
		framework.Unavailable(t, "etcdutl", err)
	}
	c := StartCluster(t, Options{Backend: framework.SQLite})
	ns, had := writeObjects(t, c)
	c.stopKubernetes(t)

	file := filepath.Join(t.TempDir(), "to-etcd.db")
	out, err := c.QuantyKubeCLI(t, "export", "--endpoint", c.QuantyKube.DSN(), "--etcd-snapshot", file)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quantykube export: %s", out)
	m := regexp.MustCompile(`revision (\d+) \(`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the export's report has no revision: %s", out)
	}
	exported, _ := strconv.ParseInt(string(m[1]), 10, 64)

	// etcd's data directory is the restored snapshot: the member etcdutl
	// makes ("default") is the one the framework starts.
	etcd := framework.Start(t, framework.Etcd, framework.Options{})
	etcd.Stop(t)
	if err := os.RemoveAll(etcd.EtcdDataDir()); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command(etcdutl, "snapshot", "restore", file, "--data-dir", etcd.EtcdDataDir(), "--name", "default").CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, o)
	}
	etcd.Start(t)
	c.QuantyKube.Stop(t)
	c.QuantyKube = etcd
	// kube-apiserver stops before its new datastore does.
	t.Cleanup(func() { c.stopKubernetes(t) })
	c.startKubernetes(t)

	ctx := c.Ctx(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	sameConfigMaps(t, listConfigMaps(t, c, ns), had, "on QuantyKube")
	if _, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, "e2e-import-secret", metav1.GetOptions{}); err != nil {
		t.Errorf("the secret: %v", err)
	}
	exact := metav1.ListOptions{ResourceVersion: strconv.FormatInt(exported, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	if l, err := cms.List(ctx, exact); err != nil || len(l.Items) != len(had) {
		t.Errorf("list at the exported revision %d: %v", exported, err)
	}
	exact.ResourceVersion = strconv.FormatInt(exported-1, 10)
	if _, err := cms.List(ctx, exact); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("list before the exported revision: %v, want 410 Gone (too old)", err)
	}
	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-after-export"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create after the export: %v", err)
	}
	if rv(t, created) <= exported {
		t.Errorf("a write on etcd got resourceVersion %s, not after the exported revision %d", created.ResourceVersion, exported)
	}
}
