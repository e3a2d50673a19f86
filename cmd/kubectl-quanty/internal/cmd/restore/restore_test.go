package restore

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
)

func newCluster(t *testing.T) *cmdtesting.Cluster { return cmdtesting.New(t, NewCmdRestore) }

// Restoring the last state of an object that was being deleted warns and
// takes the state from before its deletion began (owners: owners_test.go).
func TestRestoreSafety(t *testing.T) {
	c := newCluster(t)
	key := "/registry/configmaps/shop/kept"
	cm := cmdtesting.ConfigMap("shop", "kept", "uid-kept", map[string]string{"a": "1"})
	cm.Finalizers = []string{"example.com/keep"}
	before := cmdtesting.Encode(t, cm)
	rBefore := c.Put(key, before)
	cm.DeletionTimestamp = &cmdtesting.Created
	rDeleting := c.Put(key, cmdtesting.Encode(t, cm))
	c.Del(key)

	code, out, errOut := c.Run("", "restore", "cm/kept", "--rev", fmt.Sprint(rDeleting), "--dry-run")
	if code != 0 || !strings.Contains(errOut, fmt.Sprintf("at revision %d, configmap/kept in namespace shop was being deleted (deletionTimestamp 2026-05-01T12:00:00Z, finalizers example.com/keep)", rDeleting)) ||
		!strings.Contains(out, fmt.Sprintf("would create it as it was at revision %d (dry run)", rBefore)) {
		t.Fatalf("restore --dry-run of a state being deleted: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.Value(key); v != nil {
		t.Fatal("the dry run wrote")
	}
	// Declining the offer restores what was asked for.
	if code, out, errOut := c.Run("n\ny\n", "restore", "cm/kept", "--rev", fmt.Sprint(rDeleting)); code != 0 || !strings.Contains(out, fmt.Sprintf("restored to revision %d", rDeleting)) {
		t.Fatalf("restore, offer declined: exit %d\n%s\n%s", code, out, errOut)
	}
	c.Del(key)
	c.OK("restore", "cm/kept", "--rev", fmt.Sprint(rDeleting), "--yes")
	if v, _ := c.Value(key); !bytes.Equal(v, before) {
		t.Fatal("restore --yes did not take the state from before the deletion began")
	}
}

// A restore writes only over the state its diff showed: a change made
// while the question was on the screen is kept, and the restore says to
// run it again.
func TestRestoreChangedSinceTheDiff(t *testing.T) {
	c := newCluster(t)
	key, revs, values := c.Edits()
	meanwhile := cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "web", "uid-web", map[string]string{"color": "black", "size": "XL"}))
	put := &cmdtesting.AnswerAfter{Change: func() { c.Put(key, meanwhile) }, Answer: strings.NewReader("y\n")}
	code, out, errOut := c.RunIn(put, "restore", "cm/web", "--rev", fmt.Sprint(revs[0]))
	if code == 0 || !strings.Contains(errOut, "-  color: red\n+  color: blue\n") ||
		!strings.Contains(errOut, "not restored: configmap/web in namespace shop changed since the diff; run it again") {
		t.Fatalf("restore over a change made during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.Value(key); !bytes.Equal(v, meanwhile) {
		t.Fatal("the restore overwrote the change made during the question")
	}
	// Run again, it shows that change and restores over it.
	if code, out, errOut := c.Run("y\n", "restore", "cm/web", "--rev", fmt.Sprint(revs[0])); code != 0 || !strings.Contains(errOut, "-  color: black\n") {
		t.Fatalf("restore run again: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.Value(key); !bytes.Equal(v, values[0]) {
		t.Fatal("the restore run again did not write")
	}

	// Deleted when the diff was shown, created again before the answer.
	c.Del(key)
	put = &cmdtesting.AnswerAfter{Change: func() { c.Put(key, meanwhile) }, Answer: strings.NewReader("y\n")}
	if code, out, errOut := c.RunIn(put, "restore", "cm/web", "--rev", fmt.Sprint(revs[1])); code == 0 || !strings.Contains(errOut, "changed since the diff; run it again") {
		t.Fatalf("restore over an object created during the question: exit %d\n%s\n%s", code, out, errOut)
	}
	if v, _ := c.Value(key); !bytes.Equal(v, meanwhile) {
		t.Fatal("the restore overwrote the object created during the question")
	}
}
