package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// The aggregated API's answers to the ways a caller could read or write
// more than kube-apiserver lets them, through the real kube-apiserver
// (docs/adr/036); apiChecks runs them.

// A user allowed to list Secrets in one namespace pages through them with
// continue tokens; a token forged to start before the namespace's keys,
// or one of another user's, is refused (400) and the answer holds no key.
func checkForgedToken(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	other := c.Namespace(t)
	for _, n := range []string{ns, other} {
		for i := range 3 {
			if _, err := c.Kube.CoreV1().Secrets(n).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i)}, StringData: map[string]string{"k": "v-" + n}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-secret-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}}}
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, reader, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	zed := c.NewUser(t, "zed")
	c.Bind(t, zed, "quanty-history-reader", "")
	c.Bind(t, zed, "view", ns)
	c.Bind(t, zed, "e2e-secret-reader", ns)
	req := &historypb.Request{Key: []byte("/registry/secrets/" + ns + "/"), RangeEnd: []byte("/registry/secrets/" + ns + "0"), Limit: 1}
	code, page, body := zed.Get(t, req)
	if code != http.StatusOK || len(page.Kvs) != 1 || page.Continue == "" {
		t.Fatalf("zed's first page of Secrets in %s: %d %s", ns, code, body)
	}
	// The token's binding, with a position of zed's choosing: as a client
	// that read the format would forge it.
	_, binding, _ := strings.Cut(page.Continue, ".")
	rev, _, _ := strings.Cut(page.Continue, "/")
	for name, tok := range map[string]string{
		"a key before the namespace's": rev + "/" + base64.RawURLEncoding.EncodeToString([]byte("/registry/")) + "." + binding,
		"the old token format":         rev + "/" + base64.RawURLEncoding.EncodeToString([]byte("/registry/")),
		"another namespace's key":      rev + "/" + base64.RawURLEncoding.EncodeToString([]byte("/registry/secrets/"+other+"/s0")) + "." + binding,
	} {
		r := &historypb.Request{Key: req.Key, RangeEnd: req.RangeEnd, Limit: 1, Continue: tok}
		code, _, body := zed.Get(t, r)
		if code != http.StatusBadRequest {
			t.Errorf("a forged token (%s): %d %s, want 400", name, code, body)
		}
		if bytes.Contains(body, []byte("v-"+other)) || bytes.Contains(body, []byte("kube-system")) {
			t.Errorf("a forged token (%s) read another namespace: %s", name, body)
		}
	}
	// zed's own token, given to someone with the same access: refused.
	amy := c.NewUser(t, "amy")
	c.Bind(t, amy, "quanty-history-reader", "")
	c.Bind(t, amy, "view", ns)
	c.Bind(t, amy, "e2e-secret-reader", ns)
	r := &historypb.Request{Key: req.Key, RangeEnd: req.RangeEnd, Limit: 1, Continue: page.Continue}
	if code, _, body := amy.Get(t, r); code != http.StatusBadRequest || !bytes.Contains(body, []byte("not made for this request")) {
		t.Errorf("zed's token as amy: %d %s, want 400", code, body)
	}
	// zed's own pages reach every Secret of ns, and only them.
	var keys []string
	for range 10 {
		code, page, body := zed.Get(t, req)
		if code != http.StatusOK {
			t.Fatalf("zed's pages: %d %s", code, body)
		}
		for _, kv := range page.Kvs {
			keys = append(keys, string(kv.Key))
		}
		if page.Continue == "" {
			break
		}
		req.Continue = page.Continue
	}
	if len(keys) != 3 {
		t.Errorf("zed's pages of Secrets in %s: %q, want its 3", ns, keys)
	}
}

// A Service whose status a controller wrote (a LoadBalancer's ingress),
// deleted, then brought back by a user who may create Services but not
// write their status, comes back without that status (kube-apiserver's
// warning says so); a cluster admin's restore brings the status back.
func checkRestoreStatus(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	svcs := c.Kube.CoreV1().Services(ns)
	svc, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A status only its controller writes: a condition of its own.
	svc.Status.Conditions = []metav1.Condition{{Type: "e2e.quantyroot.io/Ready", Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: metav1.Now()}}
	if svc, err = svcs.UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := rv(t, svc)
	if err := svcs.Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eve := c.NewUser(t, "eve")
	c.Bind(t, eve, "quanty-history-restorer", "")
	c.Bind(t, eve, "edit", ns)
	key := []byte("/registry/services/specs/" + ns + "/lb")
	code, resp, body := eve.Restore(t, &historypb.Request{Key: key, Revision: before})
	if code != http.StatusOK || resp.NewRevision == 0 {
		t.Fatalf("eve's restore of the Service: %d %s", code, body)
	}
	back, err := waitFor(ctx, func(ctx context.Context) (*corev1.Service, error) { return svcs.Get(ctx, "lb", metav1.GetOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	if back.UID != svc.UID || len(back.Status.Conditions) != 0 {
		t.Errorf("eve's restore: uid %s (want %s), status %v (want none: eve may not update services/status)", back.UID, svc.UID, back.Status)
	}
	out, err := c.Kubectl(t, "--kubeconfig", eve.Kubeconfig, "auth", "can-i", "update", "services", "--subresource=status", "-n", ns)
	if err == nil || strings.TrimSpace(string(out)) != "no" {
		t.Errorf("kubectl auth can-i update services --subresource=status as eve: %q %v, want no", out, err)
	}

	if err := svcs.Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	root := c.NewUser(t, "status-root", "system:masters")
	if code, _, body := root.Restore(t, &historypb.Request{Key: key, Revision: before}); code != http.StatusOK {
		t.Fatalf("a cluster admin's restore: %d %s", code, body)
	}
	back, err = waitFor(ctx, func(ctx context.Context) (*corev1.Service, error) { return svcs.Get(ctx, "lb", metav1.GetOptions{}) })
	if err != nil || len(back.Status.Conditions) != 1 {
		t.Errorf("a cluster admin's restore: status %v (%v), want the old condition", back.Status, err)
	}
}

// An admin's delete of an object held by a finalizer, half-way through:
// a user who may update the object cannot cancel it by restoring an older
// state; a cluster admin (a raw-access group) can.
func checkRestoreTerminating(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	const hold = "e2e.quantyroot.io/cleanup"
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "going", Finalizers: []string{hold}}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cms.Patch(ctx, "going", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("release the ConfigMap: %v", err)
		}
	})
	before := rv(t, cm)
	if err := cms.Delete(ctx, "going", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	going, err := cms.Get(ctx, "going", metav1.GetOptions{})
	if err != nil || going.DeletionTimestamp == nil {
		t.Fatalf("the ConfigMap is not terminating: %v %v", going, err)
	}
	ed := c.NewUser(t, "ed")
	c.Bind(t, ed, "quanty-history-restorer", "")
	c.Bind(t, ed, "edit", ns)
	key := []byte("/registry/configmaps/" + ns + "/going")
	code, _, body := ed.Restore(t, &historypb.Request{Key: key, Revision: before})
	refused(t, "an editor's restore over a deletion in progress", code, body, http.StatusForbidden, "its deletion is in progress")
	if now, err := cms.Get(ctx, "going", metav1.GetOptions{}); err != nil || now.DeletionTimestamp == nil || now.ResourceVersion != going.ResourceVersion {
		t.Errorf("the refused restore changed the ConfigMap: %v %v", now, err)
	}
	root := c.NewUser(t, "terminating-root", "system:masters")
	if code, _, body := root.Restore(t, &historypb.Request{Key: key, Revision: before}); code != http.StatusOK {
		t.Fatalf("a cluster admin's restore over the deletion: %d %s", code, body)
	}
	if now, err := waitFor(ctx, func(ctx context.Context) (*corev1.ConfigMap, error) {
		cm, err := cms.Get(ctx, "going", metav1.GetOptions{})
		if err == nil && cm.DeletionTimestamp != nil {
			err = errStillThere
		}
		return cm, err
	}); err != nil {
		t.Errorf("after a cluster admin's restore: %v %v, want the deletion undone", now, err)
	}
}

// A user with no access to the changes of many namespaces pages through
// them: each page asks kube-apiserver at most 100 SubjectAccessReviews
// (counted by kube-apiserver itself), and the pages together hold every
// change the user may list.
func checkChangesReviews(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	mine := c.Namespace(t)
	cm, err := c.Kube.CoreV1().ConfigMaps(mine).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "first"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := rv(t, cm)
	const others = 130
	for i := range others {
		ns := c.Namespace(t)
		if _, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Kube.CoreV1().ConfigMaps(mine).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "last"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uma := c.NewUser(t, "uma")
	c.Bind(t, uma, "quanty-history-reader", "")
	c.Bind(t, uma, "view", mine)
	reviews := func() float64 {
		return metric(t, c, "apiserver_request_total", map[string]string{"resource": "subjectaccessreviews", "verb": "POST"})
	}
	req := &historypb.Request{Key: []byte("/registry/configmaps/"), RangeEnd: []byte("/registry/configmaps0"), Revision: start}
	var keys []string
	pages := 0
	for ; pages < 20; pages++ {
		before := reviews()
		b, err := run(t, c.kubectl, "--kubeconfig", uma.Kubeconfig, "get", "--raw", apiBase+"/changes?q="+q(req))
		if err != nil {
			t.Fatal(err)
		}
		if n := reviews() - before; n > 100 {
			t.Errorf("page %d asked kube-apiserver %.0f SubjectAccessReviews, more than 100", pages, n)
		}
		var lr historypb.LogResponse
		if err := proto.Unmarshal(b, &lr); err != nil {
			t.Fatal(err)
		}
		for _, e := range lr.Entries {
			keys = append(keys, string(e.Kv.Key))
		}
		if lr.Continue == "" {
			break
		}
		req.Continue = lr.Continue
	}
	want := []string{"/registry/configmaps/" + mine + "/first", "/registry/configmaps/" + mine + "/last"}
	if pages == 0 || strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("uma's changes over %d pages: %q, want %q over more than one page", pages+1, keys, want)
	}
}

// A Service brought back holds its ClusterIP and NodePort in
// kube-apiserver's allocators: a Service created right after, asking for
// the same, is refused by kube-apiserver itself.
func checkServiceAllocations(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	svcs := c.Kube.CoreV1().Services(ns)
	svc, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "np"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip, port := svc.Spec.ClusterIP, svc.Spec.Ports[0].NodePort
	if ip == "" || port == 0 {
		t.Fatalf("the Service was given no ClusterIP or NodePort: %+v", svc.Spec)
	}
	before := rv(t, svc)
	if err := svcs.Delete(ctx, "np", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eve := c.NewUser(t, "alloc-eve")
	c.Bind(t, eve, "quanty-history-restorer", "")
	c.Bind(t, eve, "edit", ns)
	if code, _, body := eve.Restore(t, &historypb.Request{Key: []byte("/registry/services/specs/" + ns + "/np"), Revision: before}); code != http.StatusOK {
		t.Fatalf("the undelete: %d %s", code, body)
	}
	// At once, before any repair loop could run.
	_, err = svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "same-ip"},
		Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
		t.Errorf("a Service asking for the restored Service's ClusterIP %s: %v, want kube-apiserver's \"already allocated\"", ip, err)
	}
	_, err = svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "same-port"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: port}}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
		t.Errorf("a Service asking for the restored Service's NodePort %d: %v, want kube-apiserver's \"already allocated\"", port, err)
	}
	back, err := svcs.Get(ctx, "np", metav1.GetOptions{})
	if err != nil || back.UID != svc.UID || back.Spec.ClusterIP != ip || back.Spec.Ports[0].NodePort != port {
		t.Errorf("the Service brought back: %+v %v", back, err)
	}
	// Deleted through kube-apiserver, it gives both back.
	if err := svcs.Delete(ctx, "np", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitFor(ctx, func(ctx context.Context) (*corev1.Service, error) {
		return svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "reuse"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80, NodePort: port}}}}, metav1.CreateOptions{})
	}); err != nil {
		t.Errorf("after the restored Service is deleted, its ClusterIP and NodePort are not free again: %v", err)
	}
}

// A namespace deleted and made again under its name does not hand its
// history to the next tenant: the new tenant reads what happened since it
// was made and is refused what came before; a cluster-wide reader reads
// it all, and the cluster admin can still bring the old objects back.
func checkReusedNamespace(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	nss := c.Kube.CoreV1().Namespaces()
	n, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-reused-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := n.Name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := nss.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	const first = "the-first-tenants-password"
	s, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": first}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := rv(t, s)
	if err := nss.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, 2*time.Minute, 500*time.Millisecond, "namespace "+ns+" gone", func(ctx context.Context) (bool, error) {
		_, err := nss.Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if _, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "the-second-tenants"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tenant := c.NewUser(t, "next-tenant")
	c.Bind(t, tenant, "quanty-history-restorer", "")
	c.Bind(t, tenant, "admin", ns)
	key := []byte("/registry/secrets/" + ns + "/db")
	secret := base64.StdEncoding.EncodeToString([]byte(first))
	leaks := func(b []byte) bool { return bytes.Contains(b, []byte(first)) || bytes.Contains(b, []byte(secret)) }

	code, _, body := tenant.Get(t, &historypb.Request{Key: key, Revision: old})
	refused(t, "the next tenant reading the old Secret", code, body, http.StatusForbidden, "belongs to an earlier namespace")
	code, lr, body := tenant.Log(t, &historypb.Request{Key: key})
	if code != http.StatusOK || len(lr.Entries) != 1 || leaks(body) {
		t.Errorf("the next tenant's log of the Secret: %d, %d entries (leaks %v), want its own one", code, len(lr.Entries), leaks(body))
	}
	code, _, body = tenant.Restore(t, &historypb.Request{Key: key, Revision: old})
	refused(t, "the next tenant restoring the old Secret", code, body, http.StatusForbidden, "belongs to an earlier namespace")
	b, err := run(t, c.kubectl, "--kubeconfig", tenant.Kubeconfig, "get", "--raw", apiBase+"/changes?q="+q(&historypb.Request{Key: []byte("/registry/secrets/"), RangeEnd: []byte("/registry/secrets0")})+"&namespace="+ns)
	if err != nil || leaks(b) {
		t.Errorf("the next tenant's changes in %s: %v, leaks the old Secret: %v", ns, err, leaks(b))
	}

	root := c.NewUser(t, "reused-root", "system:masters")
	if code, resp, body := root.Get(t, &historypb.Request{Key: key, Revision: old}); code != http.StatusOK || resp.Kv == nil {
		t.Errorf("the cluster admin reading the old Secret: %d %s", code, body)
	}
}
