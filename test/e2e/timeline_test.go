package e2e

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The incident stories of docs/KUBECTL-QUANTY.md (issue 37): their
// command lines, as the walk-through shows them; the checks run them with
// the check's namespace and times in place of its own.
const (
	docChanges3am = "kubectl quanty changes -A --since 2026-05-01T03:00:00Z --until 2026-05-01T03:05:00Z"
	docBlame      = "kubectl quanty blame configmap/settings -n shop"
	docGetPodsAt  = "kubectl quanty get pods -n shop --at -1h"
	docRevertPlan = "kubectl quanty revert -n shop --since 2026-05-01T03:00:00Z --dry-run"
	docRevert     = "kubectl quanty revert -n shop --since 2026-05-01T03:00:00Z --yes"
)

//go:embed testdata/crd-sprocket.yaml
var sprocketCRD []byte

//go:embed testdata/timeline.yaml
var timelineManifest string

var sprockets = schema.GroupVersionResource{Group: "e2e.quantykube.io", Version: "v1", Resource: "sprockets"}

// scaleManager is kubectl scale's field manager.
const scaleManager = "kubectl"

// botManager is the field manager of the client-go program of the
// stories: a rollout tool, whose writes the timeline names.
const botManager = "rollout-bot"

// timeline is what the stories' workload did, for the checks to hold the
// plugin's answers against.
type timeline struct {
	ns         string
	running    time.Time // the "hour ago": the first Pods were running
	start, end time.Time // the incident: [start, end)
	// writes are the incident's writes by kubectl and the bot: "revision
	// object" -> "action manager changes".
	writes map[string]string
	// then are the incident's objects as they were at its start, by
	// kubectl quanty's name for them.
	then map[string]*unstructured.Unstructured
}

// incidentObjects are the ten objects the incident touches, as kubectl
// names them: two it creates, one it deletes, one it deletes and creates
// again (immutable, so that a restore over it is refused), six it changes.
var incidentObjects = []string{"deployment.apps/web", "configmap/settings", "configmap/banner", "secret/db", "sprocket.e2e.quantykube.io/blue",
	"serviceaccount/web", "configmap/frozen", "service/web", "configmap/feature-flags", "secret/api-key"}

// incidentState reads the incident's objects as they are, by kubectl
// quanty's names for them; those that do not exist are absent.
func incidentState(t *testing.T, c *Cluster, ns string) map[string]*unstructured.Unstructured {
	t.Helper()
	out, err := c.Kubectl(t, append([]string{"get", "-n", ns, "--ignore-not-found", "-o", "json"}, incidentObjects...)...)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("kubectl get -o json: %v\n%s", err, out)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, it := range list.Items {
		u := &unstructured.Unstructured{Object: it}
		objs[quantyName(u)] = u
	}
	return objs
}

// checkPluginTimeline: the walk-through's incident stories, on a
// namespace holding a Deployment (with its ReplicaSets and Pods, made by
// kube-controller-manager and run by a stand-in kubelet), ConfigMaps,
// Secrets, a Service, a ServiceAccount and a custom resource, written by
// kubectl and by a client-go program with its own field manager: what
// changed (exactly those changes, with their managers; a view user sees
// its part and no more), who set a field, what ran before, and the
// revert of the ten objects the incident touched, which skips what
// controllers make and is refused where kube-apiserver would refuse it.
func checkPluginTimeline(t *testing.T, c *Cluster) {
	tl := runIncident(t, c)
	t.Run("changes", func(t *testing.T) { timelineChanges(t, c, tl) })
	t.Run("blame", func(t *testing.T) { timelineBlame(t, c, tl) })
	t.Run("get-at", func(t *testing.T) { timelineGetAt(t, c, tl) })
	t.Run("revert", func(t *testing.T) { timelineRevert(t, c, tl) })
	// After the revert: the view user's RoleBinding is not the
	// incident's to revert.
	t.Run("view", func(t *testing.T) { timelineView(t, c, tl) })
	t.Run("watch", func(t *testing.T) { timelineWatch(t, c, tl) })
}

// stamp is a point between two writes: a commit's time has millisecond
// precision and managedFields' second precision, so the writes on either
// side are a second apart.
func stamp() time.Time {
	time.Sleep(1100 * time.Millisecond)
	t := time.Now()
	time.Sleep(1100 * time.Millisecond)
	return t
}

func runIncident(t *testing.T, c *Cluster) *timeline {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	if _, err := c.KubectlIn(t, sprocketCRD, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, time.Minute, 500*time.Millisecond, "sprockets served", func(ctx context.Context) (bool, error) {
		_, err := c.Dynamic.Resource(sprockets).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	tl := &timeline{ns: ns, writes: map[string]string{}}
	if _, err := c.KubectlIn(t, []byte(strings.ReplaceAll(timelineManifest, "__NS__", ns)), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	core := c.Kube.CoreV1()
	bot := metav1.UpdateOptions{FieldManager: botManager}
	if _, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "frozen"}, Immutable: ptr.To(true),
		Data: map[string]string{"v": "1"}}, metav1.CreateOptions{FieldManager: botManager}); err != nil {
		t.Fatal(err)
	}
	svc, err := core.Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{FieldManager: botManager})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runPods(t, c, ns, d.UID, 2)
	tl.running = stamp()

	// The incident: ten objects touched by the bot and by kubectl.
	tl.then = incidentState(t, c, ns)
	tl.start = stamp()
	write := func(rev, object, what string) { tl.writes[rev+" "+object] = what }
	if d, err = c.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/pause:3.9"
	if d, err = c.Kube.AppsV1().Deployments(ns).Update(ctx, d, bot); err != nil {
		t.Fatal(err)
	}
	write(d.ResourceVersion, "deployment.apps/web", "updated "+botManager+" spec.template.spec.containers[0].image")
	settings, err := core.ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	settings.Data["color"] = "blue"
	if settings, err = core.ConfigMaps(ns).Update(ctx, settings, bot); err != nil {
		t.Fatal(err)
	}
	write(settings.ResourceVersion, "configmap/settings", "updated "+botManager+" data.color")
	db, err := core.Secrets(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	db.Data["password"] = []byte("swordfish")
	if db, err = core.Secrets(ns).Update(ctx, db, bot); err != nil {
		t.Fatal(err)
	}
	write(db.ResourceVersion, "secret/db", "updated "+botManager+" data.password")
	key, err := core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-key"}, StringData: map[string]string{"key": "s3cr3t"}},
		metav1.CreateOptions{FieldManager: botManager})
	if err != nil {
		t.Fatal(err)
	}
	write(key.ResourceVersion, "secret/api-key", "created "+botManager)
	if err := core.ConfigMaps(ns).Delete(ctx, "frozen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	frozen, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "frozen"}, Immutable: ptr.To(true),
		Data: map[string]string{"v": "2"}}, metav1.CreateOptions{FieldManager: botManager})
	if err != nil {
		t.Fatal(err)
	}
	write(frozen.ResourceVersion, "configmap/frozen", "created "+botManager)
	svc.Spec.Ports[0].Port = 8080
	if svc, err = core.Services(ns).Update(ctx, svc, bot); err != nil {
		t.Fatal(err)
	}
	write(svc.ResourceVersion, "service/web", "updated "+botManager+" spec.ports[0].port")
	for _, args := range [][]string{
		{"scale", "deployment/web", "--replicas=3"},
		{"patch", "sprocket", "blue", "--type=merge", "-p", `{"spec":{"size":5}}`},
		{"label", "serviceaccount", "web", "tier=frontend"},
		{"create", "configmap", "feature-flags", "--from-literal=beta=on"},
		{"delete", "configmap", "banner"},
	} {
		if _, err := c.Kubectl(t, append(args, "-n", ns)...); err != nil {
			t.Fatal(err)
		}
	}
	runPods(t, c, ns, d.UID, 3)
	tl.end = stamp()
	return tl
}

// runPods stands in for the kubelet (the cluster has none): it marks the
// Deployment's Pods running and ready, as the kubelet would, until its
// newest ReplicaSet has n ready Pods and no other ReplicaSet has any. The
// Pods are never bound to a node, so kube-apiserver deletes them at once
// when their ReplicaSet scales down.
func runPods(t *testing.T, c *Cluster, ns string, uid types.UID, n int32) {
	eventually(t, c.Ctx(t), 2*time.Minute, 300*time.Millisecond, fmt.Sprintf("Deployment %s rolled out with %d ready Pods", uid, n), func(ctx context.Context) (bool, error) {
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase == corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			now := metav1.Now()
			p.Status.Phase, p.Status.StartTime = corev1.PodRunning, &now
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", Image: p.Spec.Containers[0].Image, ImageID: p.Spec.Containers[0].Image,
				Ready: true, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
			if _, err := c.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: "kubelet"}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != n || d.Status.ReadyReplicas != n || d.Status.Replicas != n {
			return false, fmt.Errorf("status %+v", d.Status)
		}
		return int32(len(pods.Items)) == n, fmt.Errorf("%d Pods", len(pods.Items))
	})
}

// clock is a time as the walk-through's command lines take it.
func clock(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// words are the stories' substitutions: the namespace, and the times of
// the walk-through's command lines (whole fields: -1h is a field).
func (tl *timeline) words() map[string]string {
	return map[string]string{"shop": tl.ns, "2026-05-01T03:00:00Z": clock(tl.start), "2026-05-01T03:05:00Z": clock(tl.end), "-1h": clock(tl.running)}
}

// storyRun runs a command line of the walk-through with the timeline's
// words in place of its own, as kubeconfig's user (the admin's when
// empty).
func storyRun(t *testing.T, c *Cluster, tl *timeline, kubeconfig, line, stdin string) ShellResult {
	t.Helper()
	if !slices.Contains(docShown(t), line) {
		t.Fatalf("%s no longer shows %q", pluginDoc, line)
	}
	words := tl.words()
	var args []string
	for _, f := range strings.Fields(line)[1:] {
		if w, ok := words[f]; ok {
			f = w
		}
		args = append(args, substitute(f, words))
	}
	return c.Shell(t, kubeconfig, stdin, args...)
}

var (
	rfc3339   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	ageField  = regexp.MustCompile(`(^|\s)(\d+(\.\d+)?[smhd](\d+[smh])?|<unknown>)(\s|$)`)
	uid       = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	podHashes = regexp.MustCompile(`\bweb-[a-z0-9]{6,10}(-[a-z0-9]{5})?\b`)
	number    = regexp.MustCompile(`\b\d{2,}\b`)
	spaces    = regexp.MustCompile(`\s+`)
)

// normalized are the lines of a table or listing without what differs
// from run to run: times, ages, revisions (any number of two digits or
// more), the hashes in a Deployment's ReplicaSets' and Pods' names, and
// column widths; the namespace as the walk-through names it.
func (tl *timeline) normalized(s string) []string {
	var out []string
	for line := range strings.Lines(strings.ReplaceAll(s, tl.ns, "shop")) {
		line = rfc3339.ReplaceAllString(line, "TIME")
		for ageField.MatchString(line) {
			line = ageField.ReplaceAllString(line, "${1}AGE${5}")
		}
		line = uid.ReplaceAllString(line, "UID")
		line = podHashes.ReplaceAllString(line, "web-HASH")
		line = number.ReplaceAllString(line, "N")
		if l := strings.TrimSpace(spaces.ReplaceAllString(line, " ")); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// sameStory holds what a command line printed against the walk-through's
// example for it, normalized, with the lines keep selects on both sides
// (nil: all).
func sameStory(t *testing.T, tl *timeline, what, got, line string, keep func(string) bool) {
	t.Helper()
	filter := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if keep == nil || keep(l) {
				out = append(out, l)
			}
		}
		return out
	}
	g, w := filter(tl.normalized(got)), filter(tl.normalized(docExample(t, line)))
	if !slices.Equal(g, w) {
		t.Errorf("%s printed, times, ages and revisions aside, not what %s shows:\n%s\nwant:\n%s", what, pluginDoc, strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// byController are the rows of what kube-controller-manager and the
// stand-in kubelet did: their number varies from run to run.
func byController(l string) bool {
	return strings.Contains(l, "kube-controller-manager") || strings.Contains(l, " kubelet ") || strings.Contains(l, "pod/") ||
		strings.Contains(l, "replicaset.apps/") || strings.Contains(l, "endpoint")
}

// changeJSON is a row of kubectl quanty changes -o json.
type changeJSON struct {
	Revision  int64    `json:"revision"`
	Action    string   `json:"action"`
	Type      string   `json:"type"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Manager   string   `json:"manager"`
	Changes   []string `json:"changes"`
}

func (r changeJSON) object() string { return r.Type + "/" + r.Name }

func changesJSON(t *testing.T, c *Cluster, kubeconfig string, args ...string) []changeJSON {
	t.Helper()
	out := c.Shell(t, kubeconfig, "", append([]string{"quanty", "changes", "-o", "json"}, args...)...)
	var doc struct {
		Changes []changeJSON `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out.Stdout), &doc); out.Code != 0 || err != nil {
		t.Fatalf("changes -o json %q: %v\n%s", args, err, out)
	}
	return doc.Changes
}

// timelineChanges: the incident's window lists exactly the incident's
// writes, with their managers and fields, and what the controllers did
// in answer; the walk-through's "3 am" example is this listing.
func timelineChanges(t *testing.T, c *Cluster, tl *timeline) {
	out := storyRun(t, c, tl, "", docChanges3am, "")
	if out.Code != 0 {
		t.Fatalf("changes -A: %s", out)
	}
	t.Logf("%s:\n%s", docChanges3am, out.Stdout)
	sameStory(t, tl, "changes -A", out.Stdout, docChanges3am, func(l string) bool { return !byController(l) && strings.Contains(l, " shop ") })

	rows := changesJSON(t, c, "", "-n", tl.ns, "--since", clock(tl.start), "--until", clock(tl.end))
	got := map[string]string{}
	for _, r := range rows {
		what := strings.TrimSpace(r.Action + " " + r.Manager + " " + strings.Join(r.Changes, ","))
		switch {
		case r.Manager == "kube-controller-manager", r.Manager == "kubelet", r.Manager == "" && r.Type == "pod":
			continue // the controllers' answer, and the stand-in kubelet
		case strings.HasPrefix(r.Manager, "kubectl"), r.Action == "deleted":
			got["kubectl "+r.object()] += what + ";"
		default:
			got[fmt.Sprint(r.Revision, " ", r.object())] = what
		}
	}
	for k, want := range tl.writes {
		if got[k] != want {
			t.Errorf("changes: %s is %q, want %q", k, got[k], want)
		}
		delete(got, k)
	}
	// kubectl's own writes, whose revisions kubectl does not print.
	for obj, want := range map[string]string{
		"deployment.apps/web":             `^updated kubectl(-scale)? spec\.replicas;$`,
		"sprocket.e2e.quantykube.io/blue": `^updated kubectl-patch spec\.size;$`,
		"serviceaccount/web":              `^updated kubectl-label metadata\.labels;$`,
		"configmap/feature-flags":         `^created kubectl-create;$`,
		"configmap/banner":                `^deleted;$`,
		"configmap/frozen":                `^deleted;$`,
	} {
		if !regexp.MustCompile(want).MatchString(got["kubectl "+obj]) {
			t.Errorf("changes: kubectl's change of %s is %q, want %s", obj, got["kubectl "+obj], want)
		}
		delete(got, "kubectl "+obj)
	}
	if len(got) > 0 {
		t.Errorf("changes lists more than the incident's writes and the controllers': %q", got)
	}
}

// timelineView: a user with view in the namespace (and the history
// reader role) sees, of the same window across the cluster, the changes
// of the namespace's objects view may list, exactly as the admin sees
// them: no Secret's, no custom resource's, nothing of another namespace.
func timelineView(t *testing.T, c *Cluster, tl *timeline) {
	vera := c.NewUser(t, "vera")
	c.Bind(t, vera, "view", tl.ns)
	c.Bind(t, vera, "quanty-history-reader", "")
	window := []string{"-A", "--since", clock(tl.start), "--until", clock(tl.end)}
	admin, seen := changesJSON(t, c, "", window...), changesJSON(t, c, vera.Kubeconfig, window...)
	var want []changeJSON
	for _, r := range admin {
		if r.Namespace == tl.ns && r.Type != "secret" && !strings.HasSuffix(r.Type, ".e2e.quantykube.io") {
			want = append(want, r)
		}
	}
	if len(want) < 10 || fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("a view user's changes -A:\n%v\nwant the admin's of %s without Secrets and Sprockets:\n%v", seen, tl.ns, want)
	}
}

// timelineBlame: each field of the ConfigMap is blamed on the manager
// that set its value, and the walk-through's example is this blame.
func timelineBlame(t *testing.T, c *Cluster, tl *timeline) {
	out := storyRun(t, c, tl, "", docBlame, "")
	if out.Code != 0 {
		t.Fatalf("blame: %s", out)
	}
	t.Logf("%s:\n%s", docBlame, out.Stdout)
	sameStory(t, tl, "blame", out.Stdout, docBlame, nil)
	for obj, want := range map[string]map[string]string{
		"configmap/settings": {"data.color": botManager, "data.size": "kubectl-client-side-apply", "metadata.labels.app": "kubectl-client-side-apply"},
		"deployment/web": {"spec.template.spec.containers[name=web].image": botManager, "spec.replicas": scaleManager,
			"metadata.labels.app": "kubectl-client-side-apply", "status.readyReplicas": "kube-controller-manager"},
		"serviceaccount/web": {"metadata.labels.tier": "kubectl-label"},
	} {
		out := c.Shell(t, "", "", "quanty", "blame", obj, "-n", tl.ns, "-o", "json")
		var rep struct {
			Fields []struct{ Path, Manager string } `json:"fields"`
		}
		if err := json.Unmarshal([]byte(out.Stdout), &rep); out.Code != 0 || err != nil {
			t.Fatalf("blame %s -o json: %v\n%s", obj, err, out)
		}
		got := map[string]string{}
		for _, f := range rep.Fields {
			got[f.Path] = f.Manager
		}
		for path, m := range want {
			if got[path] != m {
				t.Errorf("blame %s: %s by %q, want %q", obj, path, got[path], m)
			}
		}
	}
}

// timelineGetAt: the Pods running before the incident, which the rollout
// replaced, as they were; the walk-through's example is this list.
func timelineGetAt(t *testing.T, c *Cluster, tl *timeline) {
	out := storyRun(t, c, tl, "", docGetPodsAt, "")
	if out.Code != 0 {
		t.Fatalf("get pods --at: %s", out)
	}
	t.Logf("%s:\n%s", docGetPodsAt, out.Stdout)
	sameStory(t, tl, "get pods --at", out.Stdout, docGetPodsAt, nil)
	if rows := tableRows(out.Stdout); len(rows) != 3 || rows[1][2] != "Running" || rows[1][5] != "deleted" || rows[2][5] != "deleted" {
		t.Errorf("get pods --at before the rollout: want its 2 running Pods, deleted since:\n%s", out.Stdout)
	}
	out = c.Shell(t, "", "", "quanty", "get", "sprockets", "-n", tl.ns, "--at", clock(tl.running), "-o", "wide")
	if rows := tableRows(out.Stdout); out.Code != 0 || len(rows) != 2 || strings.Join(rows[0], " ") != "NAME SIZE COLOR AGE NOW" ||
		rows[1][0] != "blue" || rows[1][1] != "3" || rows[1][4] != "changed" {
		t.Errorf("get sprockets --at -o wide: want the CRD's columns, size 3 then:\n%s", out)
		crd := c.Shell(t, "", "", "quanty", "log", "--key", "/registry/apiextensions.k8s.io/customresourcedefinitions/sprockets.e2e.quantykube.io", "-o", "json")
		t.Logf("the CRD's log: %s", crd)
		crd = c.Shell(t, "", "", "quanty", "get", "--key", "/registry/apiextensions.k8s.io/customresourcedefinitions/sprockets.e2e.quantykube.io", "--at", clock(tl.running))
		t.Logf("the CRD then: %s", crd)
	}
	out = c.Shell(t, "", "", "quanty", "get", "configmaps", "-n", tl.ns, "--at", clock(tl.running), "-o", "name")
	if want := "configmap/banner\nconfigmap/frozen\nconfigmap/settings\n"; out.Code != 0 || out.Stdout != want {
		t.Errorf("get configmaps --at -o name: want %q, got %s", want, out)
	}
}

// syncBuffer is a buffer a process writes while the check reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// timelineWatch: changes --watch prints a change made after it started,
// and ends at an interrupt with status 0, as kubectl get --watch does.
func timelineWatch(t *testing.T, c *Cluster, tl *timeline) {
	ctx := c.Ctx(t)
	var stdout, stderr syncBuffer
	cmd := exec.CommandContext(ctx, c.kubectl, "quanty", "changes", "-n", tl.ns, "--watch")
	// The environment of Shell's command lines.
	cmd.Env = []string{"PATH=" + c.pluginBin(t) + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECONFIG=" + c.Kubeconfig,
		"KUBECACHEDIR=" + filepath.Join(c.dir, "kubectl-cache"), "KUBERC=off"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBE") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	eventually(t, ctx, time.Minute, 200*time.Millisecond, "the list before the watch", func(context.Context) (bool, error) {
		if strings.Contains(stdout.String(), "configmap/feature-flags") {
			return true, nil
		}
		return false, fmt.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	})
	cm, err := c.Kube.CoreV1().ConfigMaps(tl.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Data: map[string]string{"a": "1"}},
		metav1.CreateOptions{FieldManager: botManager})
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^\S+ +` + cm.ResourceVersion + ` +created +configmap/late +` + botManager + ` *$`)
	eventually(t, ctx, 30*time.Second, 200*time.Millisecond, "the watch printing the new ConfigMap", func(context.Context) (bool, error) {
		if line.MatchString(stdout.String()) {
			return true, nil
		}
		return false, fmt.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("changes --watch, interrupted: %v\n%s", err, stderr.String())
	}
}

// revertedPart is what a revert puts back as it was: the uid, labels and
// content; not what controllers write in answer (a Deployment's status
// and revision annotation).
func revertedPart(u *unstructured.Unstructured) string {
	part := map[string]any{"uid": u.GetUID(), "labels": u.GetLabels()}
	for _, f := range []string{"data", "spec", "immutable", "type"} {
		if v, ok := u.Object[f]; ok {
			part[f] = v
		}
	}
	b, _ := json.Marshal(part)
	return string(b)
}

// timelineRevert: the plan of the revert of the incident (the walk-through's
// example) skips what controllers make, writes nothing; the revert brings
// every object back with its uid, deletes what the incident created, and
// leaves the one kube-apiserver refuses, with its reason and status 1.
func timelineRevert(t *testing.T, c *Cluster, tl *timeline) {
	before := incidentState(t, c, tl.ns)
	out := storyRun(t, c, tl, "", docRevertPlan, "")
	if out.Code != 0 {
		t.Fatalf("revert --dry-run: %s", out)
	}
	t.Logf("%s:\n%s", docRevertPlan, out.Stderr)
	sameStory(t, tl, "revert --dry-run", out.Stderr, docRevertPlan, nil)
	for _, want := range []string{
		`(?m)^  - +replicaset\.apps/web-\S+ +its controller recreates it \(owner Deployment/web\)$`,
		`(?m)^  - +pod/web-\S+ +its controller recreates it \(owner ReplicaSet/web-\S+\)$`,
		`(?m)^Reverting 10 objects in namespace ` + tl.ns + ` `,
	} {
		if !regexp.MustCompile(want).MatchString(out.Stderr) {
			t.Errorf("revert --dry-run: no match for %s", want)
		}
	}
	if now := incidentState(t, c, tl.ns); !sameVersions(now, before) {
		t.Fatal("revert --dry-run wrote")
	}

	out = storyRun(t, c, tl, "", docRevert, "")
	var errs []string
	for line := range strings.Lines(out.Stderr) {
		if strings.HasPrefix(line, "error: ") {
			errs = append(errs, line)
		}
	}
	t.Logf("%s:\n%s%s", docRevert, out.Stdout, strings.Join(errs, ""))
	if out.Code != 1 {
		t.Errorf("revert --yes with a refused object: exit %d, want 1\n%s", out.Code, out)
	}
	sameStory(t, tl, "revert --yes", out.Stdout+strings.Join(errs, ""), docRevert, nil)
	after := incidentState(t, c, tl.ns)
	for _, name := range incidentObjects {
		then, now := tl.then[name], after[name]
		switch {
		case name == "configmap/frozen":
			if now == nil || now.GetUID() == then.GetUID() || revertedPart(now) != revertedPart(before[name]) {
				t.Errorf("%s, whose restore kube-apiserver refuses, was written", name)
			}
		case then == nil && now != nil:
			t.Errorf("%s, created by the incident, is still there", name)
		case then != nil && (now == nil || revertedPart(now) != revertedPart(then)):
			t.Errorf("%s is not as it was before the incident:\n%v\nwant:\n%v", name, now, then)
		}
	}
	if !strings.Contains(out.Stderr, "error: restore configmap/frozen: ") || !strings.Contains(out.Stderr, "field is immutable") {
		t.Errorf("revert: the refused restore is not named with kube-apiserver's reason:\n%s", out.Stderr)
	}
	// The controllers follow the Deployment back: its first template's
	// ReplicaSet runs its two Pods again.
	runPods(t, c, tl.ns, then(tl, "deployment.apps/web").GetUID(), 2)
}

// sameVersions reports whether a and b hold the same objects at the same
// resourceVersions.
func sameVersions(a, b map[string]*unstructured.Unstructured) bool {
	if len(a) != len(b) {
		return false
	}
	for k, u := range a {
		if b[k] == nil || b[k].GetResourceVersion() != u.GetResourceVersion() {
			return false
		}
	}
	return true
}

func then(tl *timeline, name string) *unstructured.Unstructured { return tl.then[name] }
