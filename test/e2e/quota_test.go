package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestQuotaNoSpace: kube-apiserver on a SQLite store with a small
// --quota-backend-bytes. ConfigMaps of 512 KiB are created until one is
// refused with etcd's NOSPACE error, which kube-apiserver passes on; the
// NOSPACE alarm is listed by etcdctl; a delete still works and a create
// still fails; once the deleted ConfigMaps' history is pruned (a small
// --retain-bytes) and Defragment gave the space back, `etcdctl alarm
// disarm` lets creates through again: the operator's way out on etcd.
func TestQuotaNoSpace(t *testing.T) {
	etcdctl, err := framework.EtcdctlBinary()
	if err != nil {
		t.Fatalf("the quota test needs etcdctl: %v", err)
	}
	c := StartCluster(t, Options{Backend: framework.SQLite, Args: []string{"--quota-backend-bytes", "48Mi", "--retain-bytes", "1Mi"}})
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	value := strings.Repeat("q", 512<<10)
	var created []string
	for i := range 200 {
		name := fmt.Sprintf("e2e-quota-%03d", i)
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}, metav1.CreateOptions{})
		if err != nil {
			break
		}
		created = append(created, name)
	}
	if err == nil || !strings.Contains(err.Error(), "etcdserver: mvcc: database space exceeded") {
		t.Fatalf("after %d ConfigMaps of 512 KiB: create error %v, want etcd's NOSPACE", len(created), err)
	}
	t.Logf("create %d refused: %v", len(created), err)
	endpoint := c.QuantyKube.Endpoint()
	etcdctlDo := func(args ...string) string {
		b, err := exec.CommandContext(ctx, etcdctl, append([]string{"--endpoints", endpoint}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("etcdctl %v: %v\n%s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	if out := etcdctlDo("alarm", "list"); !strings.HasSuffix(out, "alarm:NOSPACE") {
		t.Fatalf("etcdctl alarm list: %q, want the NOSPACE alarm", out)
	}
	for _, name := range created {
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s under the alarm: %v", name, err)
		}
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-quota-small"}}, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("a create under the alarm: %v, want etcd's NOSPACE", err)
	}
	// Retention prunes what passes --retain-bytes every second; Defragment
	// then gives the pages back.
	cli := c.QuantyKube.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cli.Defragment(ctx, endpoint); err != nil {
			t.Fatalf("defragment: %v", err)
		}
		st, err := cli.Status(ctx, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		if st.DbSize < 24<<20 {
			t.Logf("dbSize %d after pruning and Defragment", st.DbSize)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dbSize still %d 30 s after the deletes", st.DbSize)
		}
		time.Sleep(time.Second)
	}
	if out := etcdctlDo("alarm", "disarm"); !strings.HasSuffix(out, "alarm:NOSPACE") {
		t.Fatalf("etcdctl alarm disarm: %q", out)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "e2e-quota-small"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a create after disarm: %v", err)
	}
}
