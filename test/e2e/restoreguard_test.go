package e2e

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// checkAPIRestoreGuard: a restore is refused wherever the same write
// through kube-apiserver, by the same caller, would be, with
// kube-apiserver's own answer, and nothing changes (docs/AGGREGATED-API.md,
// "What a restore checks"). Users hold the built-in roles (filled by
// kube-controller-manager's aggregation controller) and the history roles.
func checkAPIRestoreGuard(t *testing.T, c *Cluster) {
	ns := c.Namespace(t)
	ada := c.NewUser(t, "ada") // the namespace's admin
	c.Bind(t, ada, "quanty-history-restorer", "")
	c.Bind(t, ada, "admin", ns)
	root := c.NewUser(t, "root", "system:masters") // a cluster admin

	t.Run("escalate", func(t *testing.T) { guardEscalate(t, c, ns, ada, root) })
	t.Run("bind", func(t *testing.T) { guardBind(t, c, ns, ada, root) })
	t.Run("immutable-roleref", func(t *testing.T) { guardRoleRef(t, c, ns, root) })
	t.Run("pod-security", func(t *testing.T) { guardPodSecurity(t, c) })
	t.Run("terminating-namespace", func(t *testing.T) { guardTerminating(t, c, root) })
	t.Run("secret-value", func(t *testing.T) { guardSecretValue(t, c, ns) })
	t.Run("namespace-absence", func(t *testing.T) { guardNamespaceAbsence(t, c) })
}

// refused checks a restore's answer: code, and kube-apiserver's words.
func refused(t *testing.T, who string, code int, body []byte, want int, words string) {
	t.Helper()
	if code != want || !bytes.Contains(body, []byte(words)) {
		t.Errorf("%s: %d %s, want %d with %q", who, code, body, want, words)
	}
}

// An admin of a namespace may not restore a Role to rules they do not
// hold themselves (RBAC's escalate check); a cluster admin may.
func guardEscalate(t *testing.T, c *Cluster, ns string, ada, root *User) {
	ctx := c.Ctx(t)
	roles := c.Kube.RbacV1().Roles(ns)
	role, err := roles.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "wide"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wide := rv(t, role)
	role.Rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}
	if role, err = roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	req := &historypb.Request{Key: []byte("/registry/roles/" + ns + "/wide"), Revision: wide}
	code, _, body := ada.Restore(t, req)
	refused(t, "an admin restoring a Role with */*/*", code, body, http.StatusForbidden, "attempting to grant RBAC permissions not currently held")
	if now, err := roles.Get(ctx, "wide", metav1.GetOptions{}); err != nil || now.ResourceVersion != role.ResourceVersion {
		t.Errorf("the refused restore changed the Role: %v %v", now, err)
	}
	code, resp, body := root.Restore(t, req)
	if code != http.StatusOK || resp.NewRevision == 0 {
		t.Fatalf("a cluster admin's restore of the Role: %d %s", code, body)
	}
	back, err := roles.Get(ctx, "wide", metav1.GetOptions{})
	if err != nil || back.UID != role.UID || len(back.Rules) != 1 || back.Rules[0].Verbs[0] != "*" {
		t.Errorf("restored Role: %+v %v (uid want %s)", back, err, role.UID)
	}
}

// An admin of a namespace may not re-create a deleted RoleBinding to
// cluster-admin (RBAC's bind check); a cluster admin may, and the binding
// comes back with its uid.
func guardBind(t *testing.T, c *Cluster, ns string, ada, root *User) {
	ctx := c.Ctx(t)
	rbs := c.Kube.RbacV1().RoleBindings(ns)
	rb, err := rbs.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "all-powerful"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: ada.Name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rbs.Delete(ctx, rb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	req := &historypb.Request{Key: []byte("/registry/rolebindings/" + ns + "/all-powerful"), Revision: rv(t, rb)}
	code, _, body := ada.Restore(t, req)
	refused(t, "an admin re-creating a RoleBinding to cluster-admin", code, body, http.StatusForbidden, "attempting to grant RBAC permissions not currently held")
	if _, err := rbs.Get(ctx, rb.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused restore re-created the binding: %v", err)
	}
	if code, _, body := root.Restore(t, req); code != http.StatusOK {
		t.Fatalf("a cluster admin's restore of the binding: %d %s", code, body)
	}
	back, err := waitFor(ctx, func(ctx context.Context) (*rbacv1.RoleBinding, error) {
		return rbs.Get(ctx, rb.Name, metav1.GetOptions{})
	})
	if err != nil || back.UID != rb.UID {
		t.Errorf("restored binding: %v, uid %s want %s", err, back.GetUID(), rb.UID)
	}
}

// A restore over a RoleBinding whose roleRef has changed since (deleted
// and made again) changes an immutable field of the live binding: 422,
// even for a cluster admin.
func guardRoleRef(t *testing.T, c *Cluster, ns string, root *User) {
	ctx := c.Ctx(t)
	rbs := c.Kube.RbacV1().RoleBindings(ns)
	binding := func(role string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewers"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "viewers"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	}
	old, err := rbs.Create(ctx, binding("view"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rbs.Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now, err := rbs.Create(ctx, binding("edit"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := root.Restore(t, &historypb.Request{Key: []byte("/registry/rolebindings/" + ns + "/viewers"), Revision: rv(t, old)})
	refused(t, "a restore changing roleRef", code, body, http.StatusUnprocessableEntity, "roleRef")
	if got, err := rbs.Get(ctx, "viewers", metav1.GetOptions{}); err != nil || got.RoleRef.Name != "edit" || got.ResourceVersion != now.ResourceVersion {
		t.Errorf("the refused restore changed the binding: %+v %v", got, err)
	}
}

// An edit user re-creating a Pod that Pod Security's privileged level
// allowed, in a namespace that now enforces the restricted level, gets
// Pod Security's refusal.
func guardPodSecurity(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	ed := c.NewUser(t, "eddie")
	c.Bind(t, ed, "quanty-history-restorer", "")
	c.Bind(t, ed, "edit", ns)
	// The cluster runs no service account controller: the Pod's account
	// is made here, as admission requires it.
	if _, err := c.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pods := c.Kube.CoreV1().Pods(ns)
	// On the host's network: Pod Security's baseline and restricted levels
	// refuse it (kube-apiserver refuses privileged containers outright
	// without --allow-privileged).
	pod, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "host-net"}, Spec: corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false), HostNetwork: true,
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Never scheduled (the cluster has no scheduler), so gone at once.
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`)
	if _, err := c.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	code, _, body := ed.Restore(t, &historypb.Request{Key: []byte("/registry/pods/" + ns + "/host-net"), Revision: rv(t, pod)})
	refused(t, "an edit user re-creating a Pod on the host's network", code, body, http.StatusForbidden, "violates PodSecurity")
	if _, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused restore re-created the Pod: %v", err)
	}
}

// A restore into a namespace that is being deleted is refused by
// NamespaceLifecycle, for a cluster admin too.
func guardTerminating(t *testing.T, c *Cluster, root *User) {
	ctx := c.Ctx(t)
	nss := c.Kube.CoreV1().Namespaces()
	n, err := nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-terminating-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := n.Name
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	const hold = "e2e.quantyroot.io/hold"
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{hold}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cms.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("release the held ConfigMap: %v", err)
		}
	})
	gone, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gone"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nss.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitFor(ctx, func(ctx context.Context) (*corev1.Namespace, error) {
		n, err := nss.Get(ctx, ns, metav1.GetOptions{})
		if err == nil && n.Status.Phase != corev1.NamespaceTerminating {
			err = errStillThere
		}
		return n, err
	}); err != nil {
		t.Fatalf("namespace %s is not terminating: %v", ns, err)
	}
	code, _, body := root.Restore(t, &historypb.Request{Key: []byte("/registry/configmaps/" + ns + "/gone"), Revision: rv(t, gone)})
	refused(t, "a restore into a terminating namespace", code, body, http.StatusForbidden, "being terminated")
	if _, err := cms.Get(ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused restore re-created the ConfigMap: %v", err)
	}
}

// A user who may update a Secret but not get it reads no value through a
// restore: neither where the restore would write, nor where the Secret is
// already as it was.
func guardSecretValue(t *testing.T, c *Cluster, ns string) {
	ctx := c.Ctx(t)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-secret-updater"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update", "create"}}}}
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	upd := c.NewUser(t, "secret-updater")
	c.Bind(t, upd, "quanty-history-restorer", "")
	c.Bind(t, upd, "e2e-secret-updater", ns)
	secrets := c.Kube.CoreV1().Secrets(ns)
	const value = "correct-horse-battery-staple"
	s, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": value}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("/registry/secrets/" + ns + "/db")
	code, _, body := upd.Restore(t, &historypb.Request{Key: key, Revision: rv(t, s)})
	refused(t, "an update-only user restoring a Secret as it is", code, body, http.StatusForbidden, `cannot get resource \"secrets\"`)
	s.StringData = map[string]string{"password": "changed"}
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, _, body = upd.Restore(t, &historypb.Request{Key: key, Revision: rv(t, s)})
	refused(t, "an update-only user restoring a Secret's old value", code, body, http.StatusForbidden, `cannot get resource \"secrets\"`)
	if bytes.Contains(body, []byte(value)) || strings.Contains(string(body), "Y29ycmVjdC1ob3JzZ") {
		t.Errorf("the refusal carries the Secret's value: %s", body)
	}
}

// A restore to absence of a Namespace (to a time before it existed) is
// refused: its key would go at once, without the namespace's deletion.
func guardNamespaceAbsence(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-namespace-deleter"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "delete"}}}}
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	nd := c.NewUser(t, "namespace-deleter")
	c.Bind(t, nd, "quanty-history-restorer", "")
	c.Bind(t, nd, "e2e-namespace-deleter", "")
	ns := c.Namespace(t)
	n, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := nd.Restore(t, &historypb.Request{Key: []byte("/registry/namespaces/" + ns), Revision: rv(t, n) - 1})
	refused(t, "a restore of a Namespace to absence", code, body, http.StatusForbidden, "kubectl delete namespace")
	if now, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil || now.UID != n.UID || now.DeletionTimestamp != nil {
		t.Errorf("the refused restore touched the namespace: %v %v", now, err)
	}
}

// errStillThere keeps waitFor waiting.
var errStillThere = apierrors.NewConflict(corev1.Resource("objects"), "", context.DeadlineExceeded)

// waitFor calls get until it returns no error (kube-apiserver's watch
// cache follows a write through QuantyKube within moments), for 30 s.
func waitFor[T any](ctx context.Context, get func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := get(ctx)
		if err == nil || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
