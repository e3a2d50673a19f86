package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestMigrate moves a cluster's store with its history
// (docs/OPERATIONS.md, `quantykube migrate`): kube-apiserver writes
// objects to QuantyKube on SQLite and stops; the store goes to
// PostgreSQL, then MySQL, then SQLite again; kube-apiserver started on
// the last lists every object with its resourceVersion, lists at a
// revision before the last updates (history came along, where an import
// answers 410), and a watch of a resource served without the watch cache,
// resumed from a resourceVersion from before the move, gets the change
// made after it before the move and the next write after.
func TestMigrate(t *testing.T) {
	c := StartCluster(t, Options{Backend: framework.SQLite})
	ns, had := writeObjects(t, c)
	ctx := c.Ctx(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	pts := c.Kube.CoreV1().PodTemplates(ns) // UncachedResource
	pt, err := pts.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "e2e-pt"}, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := pt.ResourceVersion
	pt.Labels = map[string]string{"after": "seen"}
	updated, err := pts.Update(ctx, pt, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// e2e-import-3 was created and never updated: its resourceVersion is
	// a revision before the updates of the others.
	old := had["e2e-import-3"].ResourceVersion

	c.stopKubernetes(t)
	c.QuantyKube.Stop(t)
	from := c.QuantyKube.DSN()
	var target *framework.Target
	for _, b := range []framework.Backend{framework.Postgres, framework.MySQL, framework.SQLite} {
		target = framework.Start(t, b, framework.Options{Process: true})
		target.Stop(t)
		out, err := c.QuantyKubeCLI(t, "migrate", "--from", from, "--to", target.DSN())
		if err != nil {
			t.Fatalf("migrate to %s: %v", b, err)
		}
		t.Logf("quantykube migrate to %s: %s", b, out)
		from = target.DSN()
	}
	target.Start(t)
	c.QuantyKube = target
	// kube-apiserver stops before its new datastore does.
	t.Cleanup(func() { c.stopKubernetes(t) })
	c.startKubernetes(t)

	sameConfigMaps(t, listConfigMaps(t, c, ns), had, "before the move")
	exact := metav1.ListOptions{ResourceVersion: old, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	l, err := cms.List(ctx, exact)
	if err != nil {
		t.Fatalf("list at revision %s, before the updates: %v", old, err)
	}
	for _, cm := range l.Items {
		if cm.Name == "e2e-import-0" && cm.Data["v"] != "0" {
			t.Errorf("e2e-import-0 at revision %s: %v, want its first data", old, cm.Data)
		}
	}
	if len(l.Items) != 4 {
		t.Errorf("list at revision %s: %d configmaps, want the 4 created by then", old, len(l.Items))
	}
	w, err := pts.Watch(ctx, metav1.ListOptions{ResourceVersion: seen})
	if err != nil {
		t.Fatalf("watch from resourceVersion %s: %v", seen, err)
	}
	defer w.Stop()
	created, err := pts.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "e2e-pt-after"}, Template: pt.Template}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv(t, created) <= rv(t, updated) {
		t.Errorf("a write after the move: resourceVersion %s, not after %s", created.ResourceVersion, updated.ResourceVersion)
	}
	for _, want := range []struct {
		typ      watch.EventType
		name, rv string
	}{{watch.Modified, "e2e-pt", updated.ResourceVersion}, {watch.Added, "e2e-pt-after", created.ResourceVersion}} {
		select {
		case ev := <-w.ResultChan():
			got, ok := ev.Object.(*corev1.PodTemplate)
			if ev.Type != want.typ || !ok || got.Name != want.name || got.ResourceVersion != want.rv {
				t.Fatalf("the watch from %s: %s %#v, want %s of %s at %s", seen, ev.Type, ev.Object, want.typ, want.name, want.rv)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the watch from %s: no %s of %s", seen, want.typ, want.name)
		}
	}
}
