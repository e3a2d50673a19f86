package restore

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gone is a chain of controllers, all deleted, as the garbage collector
// leaves them after a Deployment's deletion: Deployment web, its
// ReplicaSet web-1, its Pod web-1-x, which also has a ConfigMap as an
// owner that is not its controller; and a ConfigMap whose controller is
// a ClusterRole, deleted too.
type gone struct {
	dKey, rsKey, podKey, cfgKey, crKey, sharedKey string
	dRev, rsRev, podRev, sharedRev                int64
}

func deleteChain(t *testing.T, c *cmdtesting.Cluster) gone {
	t.Helper()
	g := gone{dKey: "/registry/deployments/shop/web", rsKey: "/registry/replicasets/shop/web-1", podKey: "/registry/pods/shop/web-1-x",
		cfgKey: "/registry/configmaps/shop/cfg", crKey: "/registry/clusterroles/admin", sharedKey: "/registry/configmaps/shop/shared"}
	g.dRev = c.Put(g.dKey, cmdtesting.Encode(t, &appsv1.Deployment{TypeMeta: metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"}, ObjectMeta: cmdtesting.Meta("shop", "web", "uid-deploy")}))
	g.rsRev = c.Put(g.rsKey, cmdtesting.Encode(t, &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{Kind: "ReplicaSet", APIVersion: "apps/v1"},
		ObjectMeta: cmdtesting.Meta("shop", "web-1", "uid-rs", cmdtesting.ControlledBy("Deployment", "apps/v1", "web", "uid-deploy"))}))
	c.Put(g.cfgKey, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "cfg", "uid-cfg", nil)))
	notController := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg", UID: "uid-cfg"}
	g.podRev = c.Put(g.podKey, cmdtesting.Encode(t, &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: cmdtesting.Meta("shop", "web-1-x", "uid-pod", cmdtesting.ControlledBy("ReplicaSet", "apps/v1", "web-1", "uid-rs"), notController)}))
	c.Put(g.crKey, cmdtesting.Encode(t, &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{Kind: "ClusterRole", APIVersion: "rbac.authorization.k8s.io/v1"}, ObjectMeta: cmdtesting.Meta("", "admin", "uid-cr")}))
	shared := cmdtesting.ConfigMap("shop", "shared", "uid-shared", nil)
	shared.OwnerReferences = []metav1.OwnerReference{cmdtesting.ControlledBy("ClusterRole", "rbac.authorization.k8s.io/v1", "admin", "uid-cr")}
	g.sharedRev = c.Put(g.sharedKey, cmdtesting.Encode(t, shared))
	for _, k := range []string{g.podKey, g.rsKey, g.dKey, g.cfgKey, g.sharedKey, g.crKey} {
		c.Del(k)
	}
	return g
}

// exists is the revision key was written at, failing t unless it is
// there as want says.
func exists(t *testing.T, c *cmdtesting.Cluster, key string, want bool, when string) int64 {
	t.Helper()
	v, rev := c.Value(key)
	if (v != nil) != want {
		t.Errorf("%s: %s exists: %v, want %v", when, key, v != nil, want)
	}
	return rev
}

// The plugin follows nobody's ownerReferences on its own: --yes and
// --dry-run restore no owner, the question's default is no, and
// --with-owners restores only gone controllers in the object's namespace
// (a controller's controller too), listed with their revisions before
// anything is written; never a cluster-scoped owner, nor one that is not
// the controller.
func TestRestoreOwners(t *testing.T) {
	c := newCluster(t)
	g := deleteChain(t, c)
	rs := fmt.Sprint(g.rsRev)
	ownerGone := "Warning: its owner deployment.apps/web in namespace shop no longer exists: the garbage collector will delete replicaset.apps/web-1 in namespace shop again"
	listed := fmt.Sprintf("  deployment.apps/web in namespace shop at revision %d\n", g.dRev)

	// --yes: the object, not its owner.
	code, out, errOut := c.Run("", "restore", "rs/web-1", "--rev", rs, "--yes", "-o", "json")
	var res Result
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Action != "create" || res.Revision != g.rsRev {
		t.Fatalf("restore --yes: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	if !strings.Contains(errOut, ownerGone) || !strings.Contains(errOut, "Not restoring its gone controller owners (--with-owners restores them first):\n"+listed) {
		t.Errorf("restore --yes does not warn and name the owner it leaves:\n%s", errOut)
	}
	exists(t, c, g.dKey, false, "restore --yes")
	exists(t, c, g.rsKey, true, "restore --yes")
	c.Del(g.rsKey)

	// --dry-run: none; --dry-run --with-owners shows the owner's restore.
	if code, out, errOut := c.Run("", "restore", "rs/web-1", "--rev", rs, "--dry-run"); code != 0 || strings.Contains(errOut, "deployment.apps/web in namespace shop: would create") ||
		!strings.Contains(errOut, "Not restoring its gone controller owners") || !strings.Contains(out, "would create it") {
		t.Errorf("restore --dry-run: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := c.Run("", "restore", "rs/web-1", "--rev", rs, "--dry-run", "--with-owners"); code != 0 ||
		!strings.Contains(errOut, fmt.Sprintf("deployment.apps/web in namespace shop: would create it as it was at revision %d (dry run)", g.dRev)) {
		t.Errorf("restore --dry-run --with-owners: exit %d\n%s\n%s", code, out, errOut)
	}
	exists(t, c, g.dKey, false, "the dry runs")
	exists(t, c, g.rsKey, false, "the dry runs")

	// Asked: an empty answer is no, for the owner; then yes for the object.
	code, out, errOut = c.Run("\ny\n", "restore", "rs/web-1", "--rev", rs)
	if code != 0 || !strings.Contains(errOut, "Its gone controller owners can be restored first, in this order:\n"+listed+"Restore them first? [y/N] Not restoring its owners.\n") {
		t.Errorf("restore, the owner's question answered with an empty line: exit %d\n%s\n%s", code, out, errOut)
	}
	exists(t, c, g.dKey, false, "an empty answer")
	exists(t, c, g.rsKey, true, "an empty answer")
	c.Del(g.rsKey)
	// Yes to the question, to the owner's own diff, to the object's.
	if code, out, errOut := c.Run("y\ny\ny\n", "restore", "rs/web-1", "--rev", rs); code != 0 {
		t.Errorf("restore, yes to the owner: exit %d\n%s\n%s", code, out, errOut)
	}
	if d, r := exists(t, c, g.dKey, true, "yes to the owner"), exists(t, c, g.rsKey, true, "yes to the owner"); d >= r {
		t.Errorf("owner restored at %d, the ReplicaSet at %d: want the owner first", d, r)
	}
	c.Del(g.rsKey)
	c.Del(g.dKey)

	// --with-owners, from the Pod: its controller and that one's, listed
	// first, the topmost first; not the ConfigMap that owns it without
	// being its controller.
	code, out, errOut = c.Run("", "restore", "pod/web-1-x", "--rev", fmt.Sprint(g.podRev), "--with-owners", "--yes")
	// (Their newest states are those restored above, and deleted again.)
	plan := regexp.MustCompile("With --with-owners, its gone controller owners are restored first, in this order:\n" +
		"  deployment.apps/web in namespace shop at revision [0-9]+\n  replicaset.apps/web-1 in namespace shop at revision [0-9]+\n").FindStringIndex(errOut)
	if code != 0 || plan == nil ||
		!strings.Contains(errOut, "Warning: configmap/cfg in namespace shop is not its controller, and kubectl quanty restores only a controller owner") {
		t.Fatalf("restore --with-owners: exit %d\n%s\n%s", code, out, errOut)
	}
	if plan[1] > strings.Index(errOut, "--- deployment.apps/web") {
		t.Errorf("restore --with-owners wrote before listing the owners:\n%s", errOut)
	}
	d, r, p := exists(t, c, g.dKey, true, "--with-owners"), exists(t, c, g.rsKey, true, "--with-owners"), exists(t, c, g.podKey, true, "--with-owners")
	if d >= r || r >= p {
		t.Errorf("restored at revisions %d (Deployment), %d (ReplicaSet), %d (Pod): want that order", d, r, p)
	}
	exists(t, c, g.cfgKey, false, "--with-owners")

	// A cluster-scoped controller: never restored.
	code, out, errOut = c.Run("", "restore", "cm/shared", "--rev", fmt.Sprint(g.sharedRev), "--with-owners", "--yes")
	if code != 0 || !strings.Contains(errOut, "Warning: clusterrole.rbac.authorization.k8s.io/admin is cluster-scoped, and kubectl quanty never restores a cluster-scoped owner") {
		t.Errorf("restore --with-owners of an object a cluster-scoped owner controls: exit %d\n%s\n%s", code, out, errOut)
	}
	exists(t, c, g.crKey, false, "--with-owners, a cluster-scoped owner")
	exists(t, c, g.sharedKey, true, "--with-owners, a cluster-scoped owner")
}
