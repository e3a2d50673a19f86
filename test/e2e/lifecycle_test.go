package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// expirySlack is how long after its TTL a lease may take to be revoked: a
// loaded machine, QuantyKube's lease check interval, the revoke's write.
const expirySlack = 30 * time.Second

// checkEventTTL: kube-apiserver writes an Event with a lease of
// --event-ttl; QuantyKube must delete the Event's key when the lease
// expires, not before its TTL and not long after.
func checkEventTTL(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "e2e-ttl-event"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Name: "e2e-event-target", Namespace: ns},
		Reason:         "QuantyKubeE2E",
		Message:        "this event must expire with its lease",
		Type:           corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "quantykube-e2e"},
		Count:          1,
	}
	// The lease is granted after beforeCreate, so it cannot expire before
	// beforeCreate+EventTTL; kube-apiserver may hand out a lease it
	// granted earlier, but only one with at least EventTTL left.
	beforeCreate := time.Now()
	if _, err := c.Kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create event: %v", err)
	}
	created := time.Now()
	list, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	if got := names(list.Items); !slices.Contains(got, ev.Name) {
		t.Fatalf("event list %v lacks %s", got, ev.Name)
	}

	cli := c.QuantyKube.Client(t)
	key := "/registry/events/" + ns + "/" + ev.Name
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s from QuantyKube: %v", key, err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("QuantyKube holds %v under %s, want the event with a lease", resp.Kvs, key)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	ttl, err := cli.TimeToLive(ctx, lease)
	if err != nil {
		t.Fatalf("lease %x: %v", lease, err)
	}
	// kube-apiserver asks for the TTL plus the time it reuses the lease
	// for other events (5% of the TTL, at most a minute).
	if granted := time.Duration(ttl.GrantedTTL) * time.Second; granted < EventTTL || granted > EventTTL+time.Minute {
		t.Errorf("lease %x granted for %s, want the event TTL %s plus at most a minute", lease, granted, EventTTL)
	}

	deadline := created.Add(EventTTL + EventTTL/20 + time.Second + expirySlack)
	var lastSeen time.Time
	for {
		at := time.Now()
		resp, err := cli.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("get %s from QuantyKube: %v", key, err)
		}
		if resp.Count == 0 {
			break
		}
		lastSeen = at
		if at.After(deadline) {
			t.Fatalf("event still in QuantyKube %s after its creation (event TTL %s): its lease did not expire",
				at.Sub(beforeCreate).Round(time.Millisecond), EventTTL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	gone := time.Now()
	if gone.Before(beforeCreate.Add(EventTTL)) {
		t.Errorf("event deleted from QuantyKube within %s of its creation, before its TTL of %s",
			gone.Sub(beforeCreate).Round(time.Millisecond), EventTTL)
	}
	t.Logf("event deleted %s to %s after its creation (TTL %s)", lastSeen.Sub(created).Round(time.Millisecond),
		gone.Sub(beforeCreate).Round(time.Millisecond), EventTTL)
	if ttl, err := cli.TimeToLive(ctx, lease); err != nil || ttl.TTL != -1 {
		t.Errorf("lease %x after the expiry: %+v, %v; want it gone (TTL -1)", lease, ttl, err)
	}
	eventually(t, ctx, 30*time.Second, 250*time.Millisecond, "event NotFound through kube-apiserver", func(ctx context.Context) (bool, error) {
		_, err := c.Kube.CoreV1().Events(ns).Get(ctx, ev.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// checkRestart: every QuantyKube replica, kube-apiserver and the
// controller manager restart; the data is all there, at the same
// resourceVersion, and the next write gets a higher one.
func checkRestart(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	before, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "persistent"}, Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	c.Restart(t)
	after, err := cms.Get(ctx, "persistent", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after the restart: %v", err)
	}
	if after.ResourceVersion != before.ResourceVersion || after.UID != before.UID || after.Data["k"] != "v1" {
		t.Errorf("after the restart: rv %s uid %s data %v; before: rv %s uid %s data %v",
			after.ResourceVersion, after.UID, after.Data, before.ResourceVersion, before.UID, before.Data)
	}
	if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("namespace %s after the restart: %v", ns, err)
	}
	after.Data["k"] = "v2"
	updated, err := cms.Update(ctx, after, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update after the restart: %v", err)
	}
	if rv(t, updated) <= rv(t, before) {
		t.Errorf("a write after the restart got resourceVersion %s, not above %s", updated.ResourceVersion, before.ResourceVersion)
	}
}

// checkNamespaceDeletion: deleting a namespace with content ends, through
// the namespace controller, with the namespace and all its content gone
// from QuantyKube.
func checkNamespaceDeletion(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	core := c.Kube.CoreV1()
	if _, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "content"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	if _, err := core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "content"}, StringData: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	if _, err := core.PodTemplates(ns).Create(ctx, podTemplate("content"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create podtemplate: %v", err)
	}
	prefixes := []string{"/registry/configmaps/" + ns + "/", "/registry/secrets/" + ns + "/", "/registry/podtemplates/" + ns + "/"}
	for _, p := range prefixes {
		if n := storeKeys(t, c, p); n == 0 {
			t.Fatalf("QuantyKube holds nothing under %s: the check would prove nothing", p)
		}
	}
	if err := core.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	eventually(t, ctx, 2*time.Minute, 500*time.Millisecond, "namespace "+ns+" deleted", func(ctx context.Context) (bool, error) {
		_, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	for _, p := range append(prefixes, "/registry/namespaces/"+ns) {
		if n := storeKeys(t, c, p); n != 0 {
			t.Errorf("QuantyKube still holds %d keys under %s", n, p)
		}
	}
	cms, err := core.ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list configmaps of the deleted namespace: %v", err)
	}
	if len(cms.Items) != 0 {
		t.Errorf("configmaps left in the deleted namespace: %v", names(cms.Items))
	}
}
