package log

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
)

// log lists an object's changes newest first, what each changed, and a
// write of an earlier value as its restore; -o json is the same, with the
// key; the window and the limit narrow it.
func TestLog(t *testing.T) {
	c := cmdtesting.New(t, NewCmdLog)
	key, revs, values := c.Edits()
	back := c.Put(key, values[0]) // as a restore writes it: the old value itself
	out := c.OK("log", "cm/web")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "REVISION   AGE   TIME") ||
		!cmdtesting.HasLine(fmt.Sprintf(`^%d +\S+ +\S+ +restored \(revision %d\) +data\.color$`, back, revs[0]), lines[1]) ||
		!cmdtesting.HasLine(fmt.Sprintf(`^%d +\S+ +\S+ +updated +data\.color$`, revs[2]), lines[2]) ||
		!cmdtesting.HasLine(fmt.Sprintf(`^%d +\S+ +\S+ +created *$`, revs[0]), lines[4]) {
		t.Fatalf("log:\n%s", out)
	}
	var doc struct {
		Object    string           `json:"object"`
		Key       string           `json:"key"`
		Revisions []objects.Change `json:"revisions"`
	}
	if err := json.Unmarshal([]byte(c.OK("log", "configmaps", "web", "--reverse", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Key != key || doc.Object != "configmap/web in namespace shop" || len(doc.Revisions) != 4 || doc.Revisions[0].Revision != revs[0] ||
		doc.Revisions[3].RestoredFrom != revs[0] || doc.Revisions[3].Time == "" {
		t.Fatalf("log -o json = %+v", doc)
	}
	if out := c.OK("log", "--key", key, "--limit", "2", "-o", "yaml"); strings.Count(out, "- action:") != 2 || !strings.Contains(out, fmt.Sprintf("revision: %d", back)) {
		t.Errorf("log --limit 2 -o yaml:\n%s", out)
	}
	if out := c.OK("log", "cm/web", "--since", "1d", "-o", "json"); strings.Count(out, `"revision": `) != 4 {
		t.Errorf("log --since 1d: want every change of the last day:\n%s", out)
	}
	if out := c.OK("log", "cm/web", "--until", "1d12h", "-o", "json"); strings.Contains(out, `"revision": `) {
		t.Errorf("log --until 1d12h: want no change from before a day and a half ago:\n%s", out)
	}
	if code, out, errOut := c.Run("", "log", "cm/nothere"); code != 0 || out != "" || errOut != "No history found for configmap/nothere in namespace shop.\n" {
		t.Errorf("log of an object never there: exit %d\n%s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cm/web", "-o", "wide"}, `--output "wide": want one of table, json, yaml`},
		{[]string{"cm/web", "--limit", "-1"}, "--limit -1: want N >= 0"},
		{[]string{"cm/web", "--since", "yesterday"}, `--since: time "yesterday"`},
		{[]string{}, "want one object: TYPE/NAME (or TYPE NAME), or --key KEY"},
		{[]string{"cm/web", "--key", key}, "give either TYPE/NAME or --key, not both"},
		{[]string{"gizmo/x"}, `the server doesn't have a resource type "gizmo"`},
	} {
		if code, _, errOut := c.Run("", append([]string{"log"}, tc.args...)...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("log %q: exit %d, want %q in:\n%s", tc.args, code, tc.want, errOut)
		}
	}
}
