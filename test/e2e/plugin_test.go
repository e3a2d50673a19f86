package e2e

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/quantyroot/quantykube/test/framework"
)

// pluginChecks run kubectl quanty (cmd/kubectl-quanty, built from this
// checkout) through the built kubectl, as docs/KUBECTL-QUANTY.md shows it,
// on the cluster that serves the aggregated API. They come before namespace
// deletion, as the aggregated API's checks do.
var pluginChecks = []Check{
	{"plugin-install", checkPluginInstall},
	{"plugin-configmap", checkPluginConfigMap},
	{"plugin-undelete-namespace", checkPluginUndeleteNamespace},
	{"plugin-deleted-deployment", checkPluginDeletedDeployment},
	{"plugin-timeline", checkPluginTimeline},
	{"plugin-refused", checkPluginRefused},
	{"ui", checkUI},
}

// pluginLastChecks come after every other check of the cluster: they take
// the aggregated API away (and put it back).
var pluginLastChecks = []Check{
	{"plugin-unregistered", checkPluginUnregistered},
}

// pluginDoc is the plugin's walk-through, from the module root. The checks
// run the command lines it shows as they are, but for its names and
// revisions (substitute), and hold the plugin's answers against the ones it
// shows, so that the two cannot drift apart.
const pluginDoc = "docs/KUBECTL-QUANTY.md"

// The command lines of the walk-through's sh blocks; TestKubectlQuantyDoc
// holds this list against them.
const (
	docLog            = "kubectl quanty log configmap/web -n shop"
	docDiff           = "kubectl quanty diff configmap/web -n shop"
	docGetRev         = "kubectl quanty get configmap/web -n shop --rev 1790"
	docRestore        = "kubectl quanty restore configmap/web -n shop --rev 1790"
	docDeletedAll     = "kubectl quanty deleted -A --since 1h"
	docUndeleteDryRun = "kubectl quanty undelete namespace shop --dry-run"
	docUndelete       = "kubectl quanty undelete namespace shop --yes"
	docGetAll         = "kubectl get all,configmaps,secrets -n shop"
	docDeleted        = "kubectl quanty deleted deployments -n shop"
	docRestoreDeploy  = "kubectl quanty restore deployment/web -n shop --rev 2198"
)

var docCommands = []string{docLog, docDiff, docGetRev, docRestore, docDeletedAll, docUndeleteDryRun, docUndelete, docGetAll, docDeleted, docRestoreDeploy,
	docChanges3am, docBlame, docGetPodsAt, docRevertPlan, docRevert, docUI}

// docBlock is one fenced code block of the walk-through.
type docBlock struct {
	lang  string
	lines []string
}

// readPluginDoc is the walk-through's text and its code blocks, in order.
func readPluginDoc(t testing.TB) (string, []docBlock) {
	t.Helper()
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, pluginDoc))
	if err != nil {
		t.Fatalf("the plugin's walk-through: %v", err)
	}
	var blocks []docBlock
	var cur *docBlock
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "```") && cur == nil:
			cur = &docBlock{lang: strings.TrimPrefix(line, "```")}
		case strings.HasPrefix(line, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	if cur != nil {
		t.Fatalf("%s: a code block is not closed", pluginDoc)
	}
	return string(b), blocks
}

// docShown is every command line of the walk-through's sh blocks: the
// commands run against a cluster. Its shell blocks are install steps,
// which the plugin module's TestCompletionThroughKubectl runs.
func docShown(t testing.TB) []string {
	t.Helper()
	_, blocks := readPluginDoc(t)
	var lines []string
	for _, b := range blocks {
		if b.lang == "sh" {
			lines = append(lines, b.lines...)
		}
	}
	return lines
}

// docExample is the output the walk-through shows for a command line: the
// plain block that follows the sh block holding it.
func docExample(t testing.TB, line string) string {
	t.Helper()
	_, blocks := readPluginDoc(t)
	for i, b := range blocks {
		if b.lang == "sh" && slices.Contains(b.lines, line) {
			if i+1 == len(blocks) || blocks[i+1].lang != "" {
				t.Fatalf("%s shows no output for %q", pluginDoc, line)
			}
			return strings.Join(blocks[i+1].lines, "\n") + "\n"
		}
	}
	t.Fatalf("%s no longer shows %q", pluginDoc, line)
	return ""
}

// docRefusal is the message of the walk-through's table of refusals (its
// first column) that contains part.
func docRefusal(t testing.TB, part string) string {
	t.Helper()
	text, _ := readPluginDoc(t)
	var found []string
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		msg, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
		if strings.Contains(msg, part) {
			found = append(found, msg)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: the table of refusals has %d messages with %q, want one: %q", pluginDoc, len(found), part, found)
	}
	return found[0]
}

// substitute replaces the walk-through's words (a namespace, revisions)
// with a check's, whole words only.
func substitute(s string, words map[string]string) string {
	if len(words) == 0 {
		return s
	}
	var alts []string
	for w := range words {
		alts = append(alts, regexp.QuoteMeta(w))
	}
	re := regexp.MustCompile(`\b(` + strings.Join(alts, "|") + `)\b`)
	return re.ReplaceAllStringFunc(s, func(w string) string { return words[w] })
}

// docRun runs a command line the walk-through shows, with words in place
// of its own, through Shell as the admin.
func docRun(t *testing.T, c *Cluster, line string, words map[string]string, stdin string) ShellResult {
	t.Helper()
	if !slices.Contains(docShown(t), line) {
		t.Fatalf("%s no longer shows %q", pluginDoc, line)
	}
	f := strings.Fields(substitute(line, words))
	if f[0] != "kubectl" {
		t.Fatalf("%q: not a kubectl command", line)
	}
	return c.Shell(t, "", stdin, f[1:]...)
}

// TestKubectlQuantyDoc: the plugin checks run every command line the
// walk-through shows, and it shows every one they run as documented.
func TestKubectlQuantyDoc(t *testing.T) {
	shown := docShown(t)
	for _, l := range shown {
		if !slices.Contains(docCommands, l) {
			t.Errorf("%s shows %q, which no check runs: add it to docCommands and run it", pluginDoc, l)
		}
	}
	for _, l := range docCommands {
		if !slices.Contains(shown, l) {
			t.Errorf("%s no longer shows %q", pluginDoc, l)
		}
	}
}

// tableRows are the words of each line of a table, the header first.
func tableRows(s string) [][]string {
	var rows [][]string
	for line := range strings.Lines(s) {
		if f := strings.Fields(line); len(f) > 0 {
			rows = append(rows, f)
		}
	}
	return rows
}

// sameTable holds a table the plugin printed against the walk-through's
// example, word by word, but for the words at skip in each row after the
// header (ages and times, which differ from run to run).
func sameTable(t *testing.T, what, got, want string, skip ...int) {
	t.Helper()
	g, w := tableRows(got), tableRows(want)
	drop := func(rows [][]string) [][]string {
		out := [][]string{}
		for i, r := range rows {
			if i == 0 {
				out = append(out, r)
				continue
			}
			var kept []string
			for j, f := range r {
				if !slices.Contains(skip, j) {
					kept = append(kept, f)
				}
			}
			out = append(out, kept)
		}
		return out
	}
	if !reflect.DeepEqual(drop(g), drop(w)) {
		t.Errorf("%s printed (ages and times aside) not what %s shows:\n%s\nwant:\n%s", what, pluginDoc, got, want)
	}
}

func revs(r ...int64) []string {
	out := make([]string, len(r))
	for i, n := range r {
		out[i] = strconv.FormatInt(n, 10)
	}
	return out
}

// checkPluginInstall: kubectl finds the plugin on PATH, and its help (and
// each command's) is there, as the walk-through's "Before you need it"
// says; the APIService it names is Available.
func checkPluginInstall(t *testing.T, c *Cluster) {
	r := c.Shell(t, "", "", "plugin", "list")
	if plugin := filepath.Join(c.pluginBin(t), "kubectl-quanty"); r.Code != 0 || !strings.Contains(r.Stdout, plugin) {
		t.Errorf("kubectl plugin list does not list %s:\n%s", plugin, r)
	}
	r = c.Shell(t, "", "", "quanty", "--help")
	if r.Code != 0 || !strings.Contains(r.Stdout, "undelete") {
		t.Errorf("kubectl quanty --help:\n%s", r)
	}
	for _, cmd := range []string{"log", "get", "diff", "restore", "deleted", "undelete", "changes", "blame", "revert"} {
		r := c.Shell(t, "", "", "quanty", cmd, "--help")
		if r.Code != 0 || !strings.Contains(r.Stdout, "Examples:\n") || !strings.Contains(r.Stdout, "  kubectl quanty "+cmd+" ") {
			t.Errorf("kubectl quanty %s --help shows no examples of it:\n%s", cmd, r)
		}
	}
	r = c.Shell(t, "", "", "get", "apiservice", APIServiceName)
	if rows := tableRows(r.Stdout); r.Code != 0 || len(rows) != 2 || len(rows[1]) < 3 || rows[0][2] != "AVAILABLE" || rows[1][2] != "True" {
		t.Errorf("kubectl get apiservice %s:\n%s", APIServiceName, r)
	}
}

// logJSON is kubectl quanty log -o json.
type logJSON struct {
	Object    string `json:"object"`
	Key       string `json:"key"`
	Revisions []struct {
		Revision int64    `json:"revision"`
		Time     string   `json:"time"`
		Action   string   `json:"action"`
		Changes  []string `json:"changes"`
	} `json:"revisions"`
}

// checkPluginConfigMap: a ConfigMap edited twice (blue, green, red), as the
// walk-through's first story: its log, what the last change did, the object
// at a revision and at a time, and the restore of the state before the last
// change, answered y, which the log then lists as a restore.
func checkPluginConfigMap(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Data: map[string]string{"color": "blue"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev := []int64{rv(t, cm)}
	for _, color := range []string{"green", "red"} {
		// A commit's time has millisecond precision: writes a millisecond
		// apart or more are told apart by --at.
		time.Sleep(2 * time.Millisecond)
		cm.Data["color"] = color
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rev = append(rev, rv(t, cm))
	}
	uid := cm.UID
	r := revs(rev...)
	words := map[string]string{"shop": ns, "1502": r[0], "1790": r[1], "1873": r[2]}

	out := docRun(t, c, docLog, words, "")
	if out.Code != 0 {
		t.Fatalf("log: %s", out)
	}
	sameTable(t, "log", out.Stdout, substitute(docExample(t, docLog), words), 1, 2)

	out = c.Shell(t, "", "", "quanty", "log", "configmap/web", "-n", ns, "-o", "json")
	var lj logJSON
	if err := json.Unmarshal([]byte(out.Stdout), &lj); out.Code != 0 || err != nil {
		t.Fatalf("log -o json: %v\n%s", err, out)
	}
	var got []string
	for _, e := range lj.Revisions {
		got = append(got, fmt.Sprint(e.Revision, " ", e.Action, " ", e.Changes))
	}
	want := []string{r[2] + " updated [data.color]", r[1] + " updated [data.color]", r[0] + " created []"}
	if lj.Object != "configmap/web in namespace "+ns || lj.Key != "/registry/configmaps/"+ns+"/web" || !slices.Equal(got, want) {
		t.Fatalf("log -o json: %s, key %s, revisions %q, want %q", lj.Object, lj.Key, got, want)
	}
	atSecond := lj.Revisions[1].Time

	out = docRun(t, c, docDiff, words, "")
	if want := substitute(docExample(t, docDiff), words); out.Code != 1 || !strings.HasPrefix(out.Stdout, want) {
		t.Errorf("diff: want exit 1 and, first, what %s shows:\n%s\ngot: %s", pluginDoc, want, out)
	}

	state := func(what string, out ShellResult, color string, rev int64) {
		t.Helper()
		var got corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(out.Stdout), &got); out.Code != 0 || err != nil {
			t.Errorf("%s: %v\n%s", what, err, out)
			return
		}
		if got.Data["color"] != color || got.ResourceVersion != strconv.FormatInt(rev, 10) || got.UID != uid || got.ManagedFields != nil {
			t.Errorf("%s: color %q, resourceVersion %s, uid %s, managedFields %v; want %s, %d, the live %s, none", what, got.Data["color"], got.ResourceVersion, got.UID, got.ManagedFields, color, rev, uid)
		}
	}
	state("get --rev (as yaml)", docRun(t, c, docGetRev, words, ""), "green", rev[1])
	state("get --rev of the first", c.Shell(t, "", "", "quanty", "get", "configmap/web", "-n", ns, "--rev", r[0], "-o", "json"), "blue", rev[0])
	state("get --at the second's time", c.Shell(t, "", "", "quanty", "get", "configmap/web", "-n", ns, "--at", atSecond, "-o", "json"), "green", rev[1])

	out = docRun(t, c, docRestore, words, "y\n")
	live, err := cms.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	words["1877"] = live.ResourceVersion
	if want := substitute(docExample(t, docRestore), words); out.Code != 0 || out.Stdout != want {
		t.Errorf("restore answered y: want %q, got %s", want, out)
	}
	if !strings.HasPrefix(out.Stderr, "--- configmap/web (revision "+r[2]+" (now))\n+++ configmap/web (revision "+r[1]+")\n") ||
		!strings.Contains(out.Stderr, "\n-  color: red\n+  color: green\n") || !strings.Contains(out.Stderr, "[y/N]") {
		t.Errorf("restore did not show the diff from now and ask:\n%s", out.Stderr)
	}
	if live.Data["color"] != "green" || live.UID != uid {
		t.Errorf("after the restore: color %q, uid %s; want green, %s", live.Data["color"], live.UID, uid)
	}
	out = c.Shell(t, "", "", "get", "configmap", "web", "-n", ns, "-o", "jsonpath={.data.color} {.metadata.uid}")
	if want := "green " + string(uid); out.Code != 0 || out.Stdout != want {
		t.Errorf("kubectl get after the restore: want %q, got %s", want, out)
	}
	out = c.Shell(t, "", "", "quanty", "log", "configmap/web", "-n", ns, "--limit", "1")
	if rows := tableRows(out.Stdout); out.Code != 0 || len(rows) != 2 || rows[1][0] != live.ResourceVersion ||
		!strings.HasSuffix(out.Stdout, "restored (revision "+r[1]+")   data.color\n") {
		t.Errorf("log --limit 1 after the restore: want revision %s, restored (revision %s), data.color; got %s", live.ResourceVersion, r[1], out)
	}
}

//go:embed testdata/crd-gadget.yaml
var gadgetCRD []byte

//go:embed testdata/undelete.yaml
var undeleteManifest string

// quantyName is how kubectl quanty names an object: its kind in lower
// case, with its group, and its name.
func quantyName(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	n := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		n += "." + gvk.Group
	}
	return n + "/" + u.GetName()
}

// objectsOf reads the objects of a manifest through kubectl, by the
// names kubectl quanty gives them.
func objectsOf(t *testing.T, c *Cluster, manifest []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	out, err := c.KubectlIn(t, manifest, "get", "-f", "-", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("kubectl get -f -o json: %v", err)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, it := range list.Items {
		u := &unstructured.Unstructured{Object: it}
		objs[quantyName(u)] = u
	}
	return objs
}

// restoredPart is what an undelete brings back as it was: all but the
// resourceVersion, and what controllers write (status, and the managed
// fields that record it).
func restoredPart(u *unstructured.Unstructured) map[string]any {
	o := runtime.DeepCopyJSON(u.Object)
	unstructured.RemoveNestedField(o, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(o, "metadata", "managedFields")
	unstructured.RemoveNestedField(o, "status")
	return o
}

// docRestoreOrder is the order the walk-through says undelete restores in
// (the namespace, Roles and RoleBindings, ServiceAccounts, ConfigMaps and
// Secrets, Services and custom resources, then Deployments...), for the
// types of testdata/undelete.yaml.
var docRestoreOrder = [][]string{
	{"namespace"},
	{"role.rbac.authorization.k8s.io", "rolebinding.rbac.authorization.k8s.io"},
	{"serviceaccount"},
	{"configmap", "secret"},
	{"service", "gadget.e2e.quantykube.io"},
	{"deployment.apps"},
}

// restoreStep is the place of an object's type in docRestoreOrder.
func restoreStep(name string) int {
	typ, _, _ := strings.Cut(name, "/")
	for i, kinds := range docRestoreOrder {
		if slices.Contains(kinds, typ) {
			return i
		}
	}
	return -1
}

// owned are a namespace's objects of a kind whose controller is the one
// with uid.
func owned[T any, P interface {
	*T
	metav1.Object
}](items []T, uid types.UID) []P {
	var out []P
	for i := range items {
		o := P(&items[i])
		if ref := metav1.GetControllerOf(o); ref != nil && ref.UID == uid {
			out = append(out, o)
		}
	}
	return out
}

// waitReplicas waits until the Deployment with uid has a ReplicaSet (not
// one of old) with n Pods, made by the controllers, and returns it.
func waitReplicas(t *testing.T, c *Cluster, ns string, uid types.UID, n int, old ...types.UID) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	eventually(t, c.Ctx(t), 90*time.Second, 500*time.Millisecond, fmt.Sprintf("a new ReplicaSet of Deployment %s with %d Pods", uid, n), func(ctx context.Context) (bool, error) {
		rss, err := c.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		mine := owned(rss.Items, uid)
		if len(mine) != 1 || slices.Contains(old, mine[0].UID) {
			return false, fmt.Errorf("%d ReplicaSets of it, none new", len(mine))
		}
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if got := len(owned(pods.Items, mine[0].UID)); got != n {
			return false, fmt.Errorf("%d Pods of ReplicaSet %s", got, mine[0].Name)
		}
		rs = mine[0]
		return true, nil
	})
	return rs
}

// checkPluginUndeleteNamespace: the walk-through's second story. A
// namespace holding a Deployment (with its ReplicaSet and Pods), a custom
// resource, a Secret, a ConfigMap, a ServiceAccount, a Role and its
// RoleBinding and a Service is deleted; kubectl quanty lists what went,
// shows what undelete would write (in the documented order, skipping what
// controllers make), then brings it all back with the old uids and
// values, and the controllers make the Deployment's ReplicaSet and Pods
// anew.
func checkPluginUndeleteNamespace(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	if _, err := c.KubectlIn(t, gadgetCRD, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Dynamic.Resource(crdResource).Delete(ctx, "gadgets.e2e.quantykube.io", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the gadgets CRD: %v", err)
		}
	})
	eventually(t, ctx, time.Minute, 500*time.Millisecond, "gadgets served", func(context.Context) (bool, error) {
		_, err := c.Kubectl(t, "get", "gadgets", "-n", ns)
		return err == nil, err
	})
	manifest := []byte(strings.ReplaceAll(undeleteManifest, "__NS__", ns))
	if _, err := c.KubectlIn(t, manifest, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	// The Deployment's revision annotation and its ReplicaSet come in one
	// sync: with the Pods there, nothing but status changes it any more.
	var deploy *appsv1.Deployment
	eventually(t, ctx, 90*time.Second, 500*time.Millisecond, "the Deployment synced", func(ctx context.Context) (bool, error) {
		var err error
		deploy, err = c.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && deploy.Annotations["deployment.kubernetes.io/revision"] != "", err
	})
	oldRS := waitReplicas(t, c, ns, deploy.UID, 2)
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := objectsOf(t, c, manifest)
	if len(before) != 8 {
		t.Fatalf("read back %d of the 8 objects of testdata/undelete.yaml", len(before))
	}
	nsBefore, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	controlled := []string{"replicaset.apps/" + oldRS.Name}
	for _, p := range pods.Items {
		controlled = append(controlled, "pod/"+p.Name)
	}

	if _, err := c.Kubectl(t, "delete", "namespace", ns, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, 2*time.Minute, 500*time.Millisecond, "namespace "+ns+" gone", func(ctx context.Context) (bool, error) {
		_, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})

	// What is gone, everywhere: this namespace's rows, with the last
	// revision each had, and the one to restore (the same, but for the
	// namespace, which was being deleted first).
	out := docRun(t, c, docDeletedAll, nil, "")
	if out.Code != 0 {
		t.Fatalf("deleted -A: %s", out)
	}
	rows := map[string][]string{}
	for _, f := range tableRows(out.Stdout)[1:] {
		if len(f) == 7 {
			rows[f[0]+" "+f[1]] = f
		}
	}
	for name, u := range before {
		f := rows[ns+" "+name]
		switch {
		case f == nil:
			t.Errorf("deleted -A does not list %s in %s", name, ns)
		case u.GetKind() != "Deployment" && (f[5] != u.GetResourceVersion() || f[6] != u.GetResourceVersion()):
			t.Errorf("deleted -A: %s: last revision %s, restore --rev %s; want both %s", name, f[5], f[6], u.GetResourceVersion())
		}
	}
	for _, name := range controlled {
		if rows[ns+" "+name] == nil {
			t.Errorf("deleted -A does not list %s in %s", name, ns)
		}
	}
	if f := rows["- namespace/"+ns]; f == nil || f[6] != nsBefore.ResourceVersion || f[5] == f[6] {
		t.Errorf("deleted -A: namespace %s: %q, want restore --rev %s before its last revision", ns, f, nsBefore.ResourceVersion)
	}
	if t.Failed() {
		t.Logf("deleted -A:\n%s", out)
	}

	// What would come back: the namespace and the manifest's objects, in
	// the documented order, and the controllers' objects skipped.
	words := map[string]string{"shop": ns}
	out = docRun(t, c, docUndeleteDryRun, words, "")
	dryLine := regexp.MustCompile(`^(\S+): would create it as it was at revision (\d+) \(dry run\)$`)
	var order []string
	var point int64
	for line := range strings.Lines(out.Stdout) {
		m := dryLine.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
		if m == nil {
			t.Fatalf("undelete --dry-run printed %q:\n%s", line, out)
		}
		order = append(order, m[1])
		point, _ = strconv.ParseInt(m[2], 10, 64)
	}
	want := []string{"namespace/" + ns}
	for name := range before {
		want = append(want, name)
	}
	if out.Code != 0 || !slices.Equal(slices.Sorted(slices.Values(order)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("undelete --dry-run: want %q, got %s", want, out)
	}
	for i := 1; i < len(order); i++ {
		if restoreStep(order[i-1]) > restoreStep(order[i]) {
			t.Errorf("undelete --dry-run: %s before %s, against the order %s gives:\n%s", order[i-1], order[i], pluginDoc, out.Stdout)
		}
	}
	for name, u := range before {
		if n, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64); n > point {
			t.Errorf("undelete --dry-run restores revision %d, before %s was last written (%d)", point, name, n)
		}
	}
	_, skipped, _ := strings.Cut(out.Stderr, "\nSkipped:\n")
	for _, name := range controlled {
		if !regexp.MustCompile(`(?m)^  -  ` + regexp.QuoteMeta(name) + `\s+its controller recreates it`).MatchString(skipped) {
			t.Errorf("undelete --dry-run does not list %s as skipped:\n%s", name, out.Stderr)
		}
	}
	if _, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s after undelete --dry-run: %v, want NotFound", ns, err)
	}

	out = docRun(t, c, docUndelete, words, "")
	doneLine := regexp.MustCompile(`^(\S+) restored to revision (\d+) \(new revision \d+\)$`)
	var done []string
	for line := range strings.Lines(out.Stdout) {
		if m := doneLine.FindStringSubmatch(strings.TrimSuffix(line, "\n")); m != nil && m[2] == strconv.FormatInt(point, 10) {
			done = append(done, m[1])
		}
	}
	if out.Code != 0 || !slices.Equal(done, order) {
		t.Fatalf("undelete --yes: want %q restored to revision %d, got %s", order, point, out)
	}
	nsAfter, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || nsAfter.UID != nsBefore.UID || nsAfter.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("namespace %s after undelete: %v %v, want Active with uid %s", ns, nsAfter, err, nsBefore.UID)
	}
	after := objectsOf(t, c, manifest)
	for name, u := range before {
		if a := after[name]; a == nil || !reflect.DeepEqual(restoredPart(u), restoredPart(a)) {
			b, _ := json.Marshal(restoredPart(u))
			g := []byte("(none)")
			if a != nil {
				g, _ = json.Marshal(restoredPart(a))
			}
			t.Errorf("%s after undelete:\n%s\nwant as before:\n%s", name, g, b)
		}
	}
	rs := waitReplicas(t, c, ns, deploy.UID, 2, oldRS.UID)

	out = docRun(t, c, docGetAll, words, "")
	for _, name := range []string{"deployment.apps/web", "replicaset.apps/" + rs.Name, "service/web", "configmap/web", "secret/web-db"} {
		if out.Code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`\s`).MatchString(out.Stdout) {
			t.Errorf("kubectl get all,configmaps,secrets does not list %s: %s", name, out)
		}
	}
}

// checkPluginDeletedDeployment: the walk-through's third story. A
// Deployment deleted in the foreground (so that its last state has a
// deletionTimestamp) is listed with that last revision and the one to
// restore, as the kube-apiserver watch saw them; restore offers the right
// one when given the last; restored (answered y), it has its old uid and
// a new ReplicaSet, and is no longer listed.
func checkPluginDeletedDeployment(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	if _, err := c.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deploys := c.Kube.AppsV1().Deployments(ns)
	labels := map[string]string{"app": "web"}
	no := false
	d, err := deploys.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "web", AutomountServiceAccountToken: &no,
					Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := deploys.Watch(ctx, metav1.ListOptions{FieldSelector: byName("web"), ResourceVersion: d.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	oldRS := waitReplicas(t, c, ns, d.UID, 1)
	foreground := metav1.DeletePropagationForeground
	if err := deploys.Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	// The last state it had, and the last from before its deletion began.
	last, restore := rv(t, d), rv(t, d)
	for {
		ev := nextEvent(t, w, "the Deployment's deletion")
		if ev.Type == watch.Deleted {
			break
		}
		o := ev.Object.(*appsv1.Deployment)
		last = rv(t, o)
		if o.DeletionTimestamp == nil {
			restore = last
		}
	}
	if last == restore {
		t.Fatalf("the foreground deletion left no state with a deletionTimestamp (revision %d)", last)
	}
	r := revs(last, restore)
	words := map[string]string{"shop": ns, "2204": r[0], "2198": r[1]}

	out := docRun(t, c, docDeleted, words, "")
	if out.Code != 0 {
		t.Fatalf("deleted deployments: %s", out)
	}
	sameTable(t, "deleted deployments", out.Stdout, substitute(docExample(t, docDeleted), words), 2, 3, 4)

	out = c.Shell(t, "", "", "quanty", "restore", "deployment/web", "-n", ns, "--rev", r[0], "--dry-run")
	warned := fmt.Sprintf("at revision %d, deployment.apps/web in namespace %s was being deleted", last, ns)
	offered := fmt.Sprintf("Restoring revision %d, from before the deletion began.", restore)
	would := fmt.Sprintf("deployment.apps/web in namespace %s: would create it as it was at revision %d (dry run)\n", ns, restore)
	if out.Code != 0 || !strings.Contains(out.Stderr, warned) || !strings.Contains(out.Stderr, offered) || out.Stdout != would {
		t.Errorf("restore --rev %d (being deleted) --dry-run: want %q, %q and %q; got %s", last, warned, offered, would, out)
	}
	if _, err := deploys.Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Deployment after a dry run: %v, want NotFound", err)
	}

	// Its ReplicaSet as it was then: its owner, its controller, is gone.
	// A dry run alone restores no owner and says so; with --with-owners,
	// it lists the Deployment and shows its restore first.
	out = c.Shell(t, "", "", "quanty", "restore", "replicaset/"+oldRS.Name, "-n", ns, "--rev", r[1], "--dry-run")
	warned = fmt.Sprintf("Warning: its owner deployment.apps/web in namespace %s no longer exists: the garbage collector will delete replicaset.apps/%s in namespace %s again", ns, oldRS.Name, ns)
	listed := fmt.Sprintf("  deployment.apps/web in namespace %s at revision %d\n", ns, restore)
	offered = fmt.Sprintf("deployment.apps/web in namespace %s: would create it as it was at revision %d (dry run)\n", ns, restore)
	if left := "Not restoring its gone controller owners (--with-owners restores them first):\n" + listed; out.Code != 0 ||
		!strings.Contains(out.Stderr, warned) || !strings.Contains(out.Stderr, left) || strings.Contains(out.Stderr, offered) {
		t.Errorf("restore of the ReplicaSet --dry-run: want %q and %q, not %q; got %s", warned, left, offered, out)
	}
	out = c.Shell(t, "", "", "quanty", "restore", "replicaset/"+oldRS.Name, "-n", ns, "--rev", r[1], "--dry-run", "--with-owners")
	if plan := "With --with-owners, its gone controller owners are restored first, in this order:\n" + listed; out.Code != 0 ||
		!strings.Contains(out.Stderr, plan) || !strings.Contains(out.Stderr, offered) {
		t.Errorf("restore of the ReplicaSet --dry-run --with-owners: want %q and %q; got %s", plan, offered, out)
	}

	// The watch sees the restore as the Deployment's creation, at the new
	// revision the plugin names (the controllers write it again soon after).
	out = docRun(t, c, docRestoreDeploy, words, "y\n")
	ev := nextEvent(t, w, "the restored Deployment")
	back, ok := ev.Object.(*appsv1.Deployment)
	if ev.Type != watch.Added || !ok {
		t.Fatalf("after the restore, the watch saw %s %T, want the Deployment added\n%s", ev.Type, ev.Object, out)
	}
	done := fmt.Sprintf("deployment.apps/web in namespace %s restored to revision %d (new revision %s)\n", ns, restore, back.ResourceVersion)
	if out.Code != 0 || out.Stdout != done || back.UID != d.UID || back.DeletionTimestamp != nil {
		t.Errorf("restore answered y: want %q, uid %s, no deletionTimestamp; got uid %s, deletionTimestamp %v, %s", done, d.UID, back.UID, back.DeletionTimestamp, out)
	}
	waitReplicas(t, c, ns, d.UID, 1, oldRS.UID)
	out = docRun(t, c, docDeleted, words, "")
	if out.Code != 0 || out.Stdout != "" || out.Stderr != "No deleted objects found.\n" {
		t.Errorf("deleted deployments after the restore: %s", out)
	}
}

// checkPluginRefused: the walk-through's table of refusals, through the
// plugin as the users it names: without the reader role; with it and
// view, on a Secret's history and on a restore; and a revision that left
// the retention window.
func checkPluginRefused(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Data: map[string]string{"color": "blue"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	viewer, reader := c.NewUser(t, "plugin-viewer"), c.NewUser(t, "plugin-reader")
	c.Bind(t, viewer, "view", ns)
	c.Bind(t, reader, "quanty-history-reader", "")
	c.Bind(t, reader, "view", ns)
	// refused runs kubectl quanty ARGS as u (the admin when nil).
	refused := func(u *User, args []string, want ...string) {
		t.Helper()
		kubeconfig := ""
		if u != nil {
			kubeconfig = u.Kubeconfig
		}
		out := c.Shell(t, kubeconfig, "", append([]string{"quanty"}, args...)...)
		for _, w := range want {
			if out.Code != 1 || !strings.Contains(out.Stderr, w) {
				t.Errorf("kubectl quanty %s: want exit 1 and %q; got %s", strings.Join(args, " "), w, out)
			}
		}
	}
	noRole := docRefusal(t, "RBAC does not let you")
	refused(viewer, []string{"log", "configmap/web", "-n", ns}, noRole)
	// The same as the admin impersonating the user: --as reaches kubectl.
	refused(nil, []string{"log", "configmap/web", "-n", ns, "--as", viewer.Name}, noRole)
	if out := c.Shell(t, reader.Kubeconfig, "", "quanty", "log", "configmap/web", "-n", ns); out.Code != 0 || !strings.Contains(out.Stdout, "created") {
		t.Errorf("the reader's log of the ConfigMap: %s", out)
	}
	refused(reader, []string{"log", "secret/db", "-n", ns}, substitute(docRefusal(t, "never wider than access"), map[string]string{"shop": ns}))
	// A restore that would write something: the ConfigMap changed since.
	first := cm.ResourceVersion
	cm.Data["color"] = "red"
	if _, err := c.Kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused(reader, []string{"restore", "configmap/web", "-n", ns, "--rev", first, "--yes"}, "RBAC does not let you create restores.quanty.quantyroot.io")

	// The message names the oldest revision kept.
	c.API.waitRetainedExpired(t)
	old := c.API.retained.first
	refused(nil, []string{"get", "configmap/old", "-n", RetainedNamespace, "--rev", strconv.FormatInt(old, 10)},
		docRefusal(t, "outside the history"), fmt.Sprintf("revision %d is older than the oldest retained revision ", old))
}

// checkPluginUnregistered: without the APIService, every command that
// reads history says so, in the walk-through's words. The APIService is
// registered again afterwards.
func checkPluginUnregistered(t *testing.T, c *Cluster) {
	want := docRefusal(t, "is not registered")
	if _, err := c.Kubectl(t, "delete", "apiservice", APIServiceName); err != nil {
		t.Fatal(err)
	}
	// Deferred, not a cleanup: t's context, which kubectl runs under, ends
	// before its cleanups run.
	defer c.API.apply(t, c)
	// The aggregator drops the API's route when it sees the deletion.
	eventually(t, c.Ctx(t), 30*time.Second, 500*time.Millisecond, "kubectl quanty log without the APIService", func(context.Context) (bool, error) {
		out := c.Shell(t, "", "", "quanty", "log", "configmap/web", "-n", "default")
		if out.Code == 1 && strings.Contains(out.Stderr, want) {
			return true, nil
		}
		return false, fmt.Errorf("%s", out)
	})
	for _, args := range [][]string{
		{"get", "configmap/web", "-n", "default", "--rev", "1"},
		{"diff", "configmap/web", "-n", "default"},
		{"restore", "configmap/web", "-n", "default", "--rev", "1", "--yes"},
		{"deleted", "-n", "default"},
		{"undelete", "namespace", "shop", "--dry-run"},
	} {
		out := c.Shell(t, "", "", append([]string{"quanty"}, args...)...)
		code := 1
		if args[0] == "diff" {
			code = 2 // an error, as kubectl diff's
		}
		if out.Code != code || !strings.Contains(out.Stderr, want) {
			t.Errorf("kubectl quanty %s without the APIService: want exit %d and %q; got %s", strings.Join(args, " "), code, want, out)
		}
	}
}
