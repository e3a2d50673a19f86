package revert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/pkg/timearg"
)

func newCluster(t *testing.T) *cmdtesting.Cluster { return cmdtesting.New(t, NewCmdRevert) }

// revertScene is a namespace in which, after a point in time, one
// ConfigMap was changed, one deleted, one created, a labelled one
// changed, and a Deployment's ReplicaSet (a controller's) changed.
type revertScene struct {
	point string // the time between before and after, as --since takes it
	then  map[string][]byte
	keys  struct{ changed, deleted, created, other, rs, untouched string }
}

func newRevertScene(t *testing.T, c *cmdtesting.Cluster) *revertScene {
	sc := &revertScene{then: map[string][]byte{}}
	k := &sc.keys
	k.changed, k.deleted, k.created = "/registry/configmaps/shop/web", "/registry/configmaps/shop/old", "/registry/configmaps/shop/new"
	k.other, k.rs, k.untouched = "/registry/configmaps/shop/other", "/registry/replicasets/shop/web-5d8", "/registry/configmaps/shop/same"
	c.Put("/registry/namespaces/shop", cmdtesting.Encode(t, cmdtesting.Namespace(false)))
	other := cmdtesting.ConfigMap("shop", "other", "uid-other", map[string]string{"x": "1"})
	other.Labels = map[string]string{"app": "other"}
	rs := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{Kind: "ReplicaSet", APIVersion: "apps/v1"},
		ObjectMeta: cmdtesting.Meta("shop", "web-5d8", "uid-rs", cmdtesting.ControlledBy("Deployment", "apps/v1", "web", "uid-d"))}
	for key, obj := range map[string][]byte{
		k.changed:   cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "web", "uid-web", map[string]string{"color": "blue"})),
		k.deleted:   cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "old", "uid-old", nil)),
		k.other:     cmdtesting.Encode(t, other),
		k.rs:        cmdtesting.Encode(t, rs),
		k.untouched: cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "same", "uid-same", nil)),
	} {
		c.Put(key, obj)
		sc.then[key] = obj
	}
	time.Sleep(5 * time.Millisecond)
	sc.point = timearg.Format(time.Now().UnixMilli(), time.UTC)
	time.Sleep(5 * time.Millisecond)
	c.Put(k.changed, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "web", "uid-web", map[string]string{"color": "red"})))
	c.Del(k.deleted)
	c.Put(k.created, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "new", "uid-new", nil)))
	other.Data["x"] = "2"
	c.Put(k.other, cmdtesting.Encode(t, other))
	rs.Labels = map[string]string{"pod-template-hash": "5d8"}
	c.Put(k.rs, cmdtesting.Encode(t, rs))
	return sc
}

// A revert shows its plan and writes nothing until yes; then each object
// is as it was at the point: changed ones restored, deleted ones back
// with their uid, created ones gone; a controller's ReplicaSet skipped.
func TestRevert(t *testing.T) {
	c := newCluster(t)
	sc := newRevertScene(t, c)
	k := sc.keys
	state := func() map[string][]byte {
		m := map[string][]byte{}
		for _, key := range []string{k.changed, k.deleted, k.created, k.other, k.rs, k.untouched} {
			m[key], _ = c.Value(key)
		}
		return m
	}
	before := state()

	code, out, errOut := c.Run("", "revert", "-n", "shop", "--since", sc.point, "--dry-run", "--diff")
	if code != 0 || !bytes.Equal(fmt.Append(nil, state()), fmt.Append(nil, before)) {
		t.Fatalf("revert --dry-run: exit %d, or it wrote\n%s\n%s", code, out, errOut)
	}
	for _, re := range []string{
		`(?m)^restore +configmap/web +\d+ +\d+ +data\.color$`,
		`(?m)^re-create +configmap/old +\(absent\) +\d+ *$`,
		`(?m)^delete +configmap/new +\d+ +\(absent\) *$`,
		`(?m)^restore +configmap/other `,
		`(?m)^  - +replicaset\.apps/web-5d8 +its controller recreates it \(owner Deployment/web\)$`,
		`(?m)^-  color: red\n\+  color: blue$`,
		`(?m)^--- configmap/new \(now\)$`,
	} {
		if !cmdtesting.HasLine(re, errOut) {
			t.Errorf("revert --dry-run --diff: no match for %s in\n%s", re, errOut)
		}
	}
	if strings.Contains(errOut, "configmap/same") || !strings.Contains(out, "configmap/new: would be deleted as at revision") {
		t.Errorf("revert --dry-run:\n%s\n%s", out, errOut)
	}

	// -l: the labelled one only; answered no: nothing written.
	code, _, errOut = c.Run("n\n", "revert", "-n", "shop", "--since", sc.point, "-l", "app=other")
	if code == 0 || !strings.Contains(errOut, "Reverting 1 objects") || !bytes.Equal(fmt.Append(nil, state()), fmt.Append(nil, before)) {
		t.Fatalf("revert -l app=other answered no: exit %d\n%s", code, errOut)
	}

	code, out, errOut = c.Run("", "revert", "-n", "shop", "--since", sc.point, "--yes", "-o", "json")
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Objects) != 4 || len(rep.Skipped) != 1 {
		t.Fatalf("revert --yes: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	after := state()
	for _, key := range []string{k.changed, k.deleted, k.other, k.untouched} {
		if !bytes.Equal(after[key], sc.then[key]) {
			t.Errorf("%s is not as it was at the point", key)
		}
	}
	if after[k.created] != nil || !bytes.Equal(after[k.rs], before[k.rs]) {
		t.Errorf("after the revert: the created ConfigMap is there (%v), or the ReplicaSet was written", after[k.created] != nil)
	}
	if _, out, errOut := c.Run("", "revert", "-n", "shop", "--since", sc.point, "--yes"); !strings.Contains(errOut, "Nothing to revert") && !strings.Contains(out+errOut, "restore ") {
		t.Errorf("revert again:\n%s%s", out, errOut)
	}
}

// An object changed while the question is on the screen is left alone
// and named; the rest are reverted; the exit status says one failed.
func TestRevertChangedSincePlan(t *testing.T) {
	c := newCluster(t)
	sc := newRevertScene(t, c)
	k := sc.keys
	later := cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "web", "uid-web", map[string]string{"color": "green"}))
	in := &cmdtesting.AnswerAfter{Change: func() { c.Put(k.changed, later) }, Answer: strings.NewReader("y\n")}
	code, out, errOut := c.RunIn(in, "revert", "-n", "shop", "--since", sc.point)
	if code != 1 || !strings.Contains(errOut, "error: restore configmap/web: changed since the plan was read, so left alone") ||
		!strings.Contains(errOut, "1 of 4 objects were not reverted") || !strings.Contains(out, "configmap/old re-created as at revision") {
		t.Fatalf("revert with a change during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.Value(k.changed); !bytes.Equal(v, later) {
		t.Error("the change made during the question was overwritten")
	}
	if v, _ := c.Value(k.deleted); !bytes.Equal(v, sc.then[k.deleted]) {
		t.Error("the rest was not reverted")
	}
}

// Bad input gets kubectl's kind of answer.
func TestRevertErrors(t *testing.T) {
	c := newCluster(t)
	sc := newRevertScene(t, c)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "shop"}, "want --since TIME or --to-rev N"},
		{[]string{"-n", "shop", "--since", "+1h"}, "--since +1h is 1h0m0s in the future"},
		{[]string{"-n", "shop", "--since", sc.point, "-l", "app in (a"}, `-l "app in (a": unable to parse requirement`},
		{[]string{"-n", "shop", "--since", sc.point, "gizmos"}, `the server doesn't have a resource type "gizmos"`},
		{[]string{"-n", "shop", "--since", sc.point, "nodes"}, "nodes is not namespaced"},
		{[]string{"-n", "shop", "--to-rev", "999999"}, "--to-rev 999999: the point to go back to is outside the history QuantyKube retains"},
		{[]string{"-n", "shop", "--to-rev", "3", "--since", "1h"}, "--since and --to-rev exclude each other"},
	} {
		code, _, errOut := c.Run("", append([]string{"revert"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("revert %q: exit %d, want %q in\n%s", tc.args, code, tc.want, errOut)
		}
	}
}
