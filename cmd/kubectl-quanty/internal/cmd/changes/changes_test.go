package changes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/restore"
	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func newCluster(t *testing.T) *cmdtesting.Cluster {
	return cmdtesting.New(t, NewCmdChanges, restore.NewCmdRestore)
}

func newClusterOn(t *testing.T, o mvcc.Options) *cmdtesting.Cluster {
	return cmdtesting.NewOn(t, o, NewCmdChanges, restore.NewCmdRestore)
}

// changesScene writes, in shop: a Deployment created by kubectl and
// scaled by another manager, a ConfigMap created, edited and deleted, an
// Event, a Lease; and a ConfigMap in the namespace other. It returns the
// revisions, oldest first, by name.
func changesScene(t *testing.T, c *cmdtesting.Cluster) map[string]int64 {
	now := time.Now()
	revs := map[string]int64{}
	replicas := int32(1)
	d := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"}, ObjectMeta: cmdtesting.Meta("shop", "web", "ud"),
		Spec: appsv1.DeploymentSpec{Replicas: &replicas}}
	d.Labels = map[string]string{"app": "web"}
	d.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second))
	d.ManagedFields = []metav1.ManagedFieldsEntry{cmdtesting.Managed("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, now, `{"f:spec":{}}`)}
	revs["deploy created"] = c.Put("/registry/deployments/shop/web", cmdtesting.Encode(t, d))
	replicas = 3
	d.ManagedFields = append(d.ManagedFields, cmdtesting.Managed("scaler", metav1.ManagedFieldsOperationUpdate, now.Add(time.Second), `{"f:spec":{"f:replicas":{}}}`))
	revs["deploy scaled"] = c.Put("/registry/deployments/shop/web", cmdtesting.Encode(t, d))

	cm := cmdtesting.ConfigMap("shop", "cfg", "uc", map[string]string{"color": "blue"})
	cm.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second))
	cm.ManagedFields = []metav1.ManagedFieldsEntry{cmdtesting.Managed("kubectl-create", metav1.ManagedFieldsOperationUpdate, now, `{"f:data":{}}`)}
	revs["cm created"] = c.Put("/registry/configmaps/shop/cfg", cmdtesting.Encode(t, cm))
	cm.Data["color"] = "red"
	cm.ManagedFields = append(cm.ManagedFields, cmdtesting.Managed("kubectl-edit", metav1.ManagedFieldsOperationUpdate, now.Add(2*time.Second), `{"f:data":{"f:color":{}}}`))
	revs["cm edited"] = c.Put("/registry/configmaps/shop/cfg", cmdtesting.Encode(t, cm))
	revs["event"] = c.Put("/registry/events/shop/web.1", cmdtesting.Encode(t, &corev1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"}, ObjectMeta: cmdtesting.Meta("shop", "web.1", "ue")}))
	revs["lease"] = c.Put("/registry/leases/shop/lock", cmdtesting.Encode(t, &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"}, ObjectMeta: cmdtesting.Meta("shop", "lock", "ul")}))
	revs["other"] = c.Put("/registry/configmaps/other/cfg", cmdtesting.Encode(t, cmdtesting.ConfigMap("other", "cfg", "uo", nil)))
	revs["cm deleted"] = c.Del("/registry/configmaps/shop/cfg")
	return revs
}

// changes lists the window newest first (or oldest first), each change's
// action, object, manager and fields; Events only when named; -A every
// namespace; -l by the labels at the change.
func TestChanges(t *testing.T) {
	c := newCluster(t)
	r := changesScene(t, c)
	out := c.OK("changes")
	rows := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		fmt.Sprintf(`^\S+ +%d +deleted +configmap/cfg +- *$`, r["cm deleted"]),
		fmt.Sprintf(`^\S+ +%d +updated +configmap/cfg +kubectl-edit +data\.color$`, r["cm edited"]),
		fmt.Sprintf(`^\S+ +%d +created +configmap/cfg +kubectl-create *$`, r["cm created"]),
		fmt.Sprintf(`^\S+ +%d +updated +deployment\.apps/web +scaler +spec\.replicas$`, r["deploy scaled"]),
		fmt.Sprintf(`^\S+ +%d +created +deployment\.apps/web +kubectl-client-side-apply *$`, r["deploy created"]),
	}
	if len(rows) != len(want)+1 || !cmdtesting.HasLine(`^TIME +REVISION +ACTION +OBJECT +MANAGER +CHANGES$`, rows[0]) {
		t.Fatalf("changes: want a header and %d rows:\n%s", len(want), out)
	}
	for i, re := range want {
		if !cmdtesting.HasLine(re, rows[i+1]) {
			t.Errorf("changes row %d = %q, want %s", i, rows[i+1], re)
		}
	}

	out = c.OK("changes", "-A", "--reverse")
	rows = strings.Split(strings.TrimSpace(out), "\n")
	if len(rows) != 7 || !cmdtesting.HasLine(`NAMESPACE +MANAGER`, rows[0]) || !cmdtesting.HasLine(fmt.Sprintf(`^\S+ +%d +created +deployment\.apps/web +shop `, r["deploy created"]), rows[1]) ||
		!cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +configmap/cfg +other `, r["other"]), out) {
		t.Errorf("changes -A --reverse:\n%s", out)
	}
	if out := c.OK("changes", "ev"); !cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +event/web\.1 `, r["event"]), out) || strings.Count(out, "\n") != 2 {
		t.Errorf("changes ev:\n%s", out)
	}
	if out := c.OK("changes", "leases"); !cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +lease\.coordination\.k8s\.io/lock `, r["lease"]), out) || strings.Count(out, "\n") != 2 {
		t.Errorf("changes leases:\n%s", out)
	}
	if out := c.OK("changes", "-l", "app=web", "deploy,cm"); strings.Count(out, "\n") != 3 || strings.Contains(out, "configmap") {
		t.Errorf("changes -l app=web:\n%s", out)
	}
	var doc struct {
		Changes []Row `json:"changes"`
	}
	if err := json.Unmarshal([]byte(c.OK("changes", "configmaps", "--limit", "2", "-o", "json")), &doc); err != nil || len(doc.Changes) != 2 ||
		doc.Changes[1].Manager != "kubectl-edit" || doc.Changes[0].Key != "/registry/configmaps/shop/cfg" {
		t.Errorf("changes configmaps --limit 2 -o json: %v %+v", err, doc.Changes)
	}

	// A restore is told from the key's own log, as log tells it.
	c.Put("/registry/configmaps/shop/cfg", cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "cfg", "uc2", map[string]string{"color": "green"})))
	c.OK("restore", "cm/cfg", "--rev", fmt.Sprint(r["cm created"]), "--yes")
	if out := c.OK("changes", "cm", "--limit", "1"); !cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +\d+ +restored \(revision %d\) +configmap/cfg +- +data\.color, `, r["cm created"]), out) {
		t.Errorf("changes after a restore:\n%s", out)
	}
}

// A caller sees the changes of what it may list, and nothing else.
func TestChangesAccess(t *testing.T) {
	c := newCluster(t)
	// shop exists before what it holds: the aggregated API shows a
	// namespace's history from its making on to a caller allowed in it
	// alone (ADR-036).
	c.Put("/registry/namespaces/shop", []byte("{}"))
	changesScene(t, c)
	c.Grants.Allow["viewer"] = []string{"list configmaps in namespace shop", "list changes.quanty.quantyroot.io in namespace shop", "list changes.quanty.quantyroot.io"}
	out := c.OK("changes", "-A", "--as", "viewer")
	if strings.Contains(out, "deployment") || strings.Contains(out, "other") || strings.Count(out, "configmap/cfg") != 3 {
		t.Errorf("changes -A as a viewer of shop's ConfigMaps:\n%s", out)
	}
}

// Bad input gets kubectl's kind of answer.
func TestChangesErrors(t *testing.T) {
	c := newCluster(t)
	changesScene(t, c)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gizmos"}, `the server doesn't have a resource type "gizmos"`},
		{[]string{"--since", "+1h"}, "--since +1h is 1h0m0s in the future"},
		{[]string{"--until", "2h"}, "--until 2h is not after --since 1h: the window is empty"},
		{[]string{"-l", "app in (x"}, `-l "app in (x"`},
		{[]string{"-A", "-n", "shop"}, "-A and -n exclude each other"},
		{[]string{"-w", "--until", "5m"}, "--watch follows changes from now on"},
		{[]string{"cm/cfg"}, `"cm/cfg": want a type`},
	} {
		code, _, errOut := c.Run("", append([]string{"changes"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("changes %q: exit %d, want %q in\n%s", tc.args, code, tc.want, errOut)
		}
	}
}

// syncBuffer is a bytes.Buffer for a writer and a reader at once.
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

// --watch prints the list, then a change made after it started; an
// interrupt ends it with status 0.
func TestChangesWatch(t *testing.T) {
	c := newCluster(t)
	changesScene(t, c)
	var out, errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int)
	go func() { done <- c.RunContext(ctx, strings.NewReader(""), &out, &errOut, "changes", "cm", "--watch") }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "deleted") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	rev := c.Put("/registry/configmaps/shop/new", cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "new", "un", nil)))
	for !cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +configmap/new `, rev), out.String()) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 || !cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +configmap/new `, rev), out.String()) || strings.Count(out.String(), "TIME") != 1 {
		t.Fatalf("changes --watch: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
}

// Keys kept for less than the window (--retain-prefix) do not hide the
// window of the others: the listing goes around their prefix, lists them
// from their floor on, and names them. A window older than what every
// key is kept for is the error, naming the flag.
func TestChangesShortRetention(t *testing.T) {
	var ahead atomic.Int64 // how far the store's clock runs ahead of the plugin's
	c := newClusterOn(t, mvcc.Options{
		Now:            func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
		RetainPrefixes: []mvcc.RetentionRule{{Prefix: []byte("/registry/configmaps/other/"), Retain: mvcc.MinRetain}},
		PruneInterval:  time.Hour, // the test prunes
	})
	r := changesScene(t, c)
	ahead.Store(int64(2 * time.Minute))
	late := c.Put("/registry/configmaps/other/late", cmdtesting.Encode(t, cmdtesting.ConfigMap("other", "late", "ul", nil)))
	if _, err := c.Store.Prune(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"changes", "-A"}, {"changes", "-A", "configmaps"}} {
		code, out, errOut := c.Run("", args...)
		if code != 0 || !cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +configmap/cfg +shop `, r["cm created"]), out) ||
			!cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +configmap/late +other `, late), out) || strings.Contains(out, fmt.Sprint(" ", r["other"], " ")) ||
			!strings.Contains(errOut, "Warning: QuantyKube keeps the keys under /registry/configmaps/other/ for less than the window (--retain-prefix): their changes are listed from ") {
			t.Errorf("%q with configmaps of other kept 75 s: exit %d\n%s\n%s", args, code, out, errOut)
		}
	}
	if code, out, errOut := c.Run("", "changes"); code != 0 || !cmdtesting.HasLine(fmt.Sprintf(`(?m)^\S+ +%d +created +configmap/cfg `, r["cm created"]), out) || errOut != "" {
		t.Errorf("changes -n shop, outside the short rule: exit %d\n%s\n%s", code, out, errOut)
	}

	// Everything kept 75 s, two minutes on: the last hour is outside.
	c = newClusterOn(t, mvcc.Options{Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }, Retain: mvcc.MinRetain, PruneInterval: time.Hour})
	ahead.Store(0)
	changesScene(t, c)
	ahead.Store(int64(2 * time.Minute))
	c.Put("/registry/configmaps/other/late", cmdtesting.Encode(t, cmdtesting.ConfigMap("other", "late", "ul", nil)))
	if _, err := c.Store.Prune(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := c.Run("", "changes", "--since", "1h"); code == 0 || !strings.Contains(errOut, "--since 1h: the window's start is outside the history QuantyKube retains") {
		t.Errorf("changes --since 1h, all kept 75 s: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := c.Run("", "changes", "--since", "1h", "--until", "30m"); code == 0 || !strings.Contains(errOut, "--since 1h --until 30m: the whole window is outside") || strings.Contains(errOut, "Warning") {
		t.Errorf("changes --until 30m, all kept 75 s: exit %d\n%s", code, errOut)
	}
}
