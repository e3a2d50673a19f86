package diff

import (
	"bytes"
	"strings"
	"testing"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
)

func newCluster(t *testing.T) *cmdtesting.Cluster { return cmdtesting.New(t, NewCmdDiff) }

func TestExternalDiff(t *testing.T) {
	c := newCluster(t)
	c.Edits()
	t.Setenv("KUBECTL_EXTERNAL_DIFF", "diff -u -N --bad;arg")
	var out, errOut bytes.Buffer
	if code := c.RunTo(strings.NewReader(""), &out, &errOut, "diff", "cm/web"); code != 1 {
		t.Fatalf("exit %d, want 1 (differences)\n%s\n%s", code, out.String(), errOut.String())
	}
	if !cmdtesting.HasLine(`(?m)^--- .*/FROM-REV-\d+/v1\.ConfigMap\.shop\.web\t`, out.String()) || !strings.Contains(out.String(), "-  color: green\n+  color: red\n") {
		t.Fatalf("external diff printed:\n%s", out.String())
	}
}

// diff fails as kubectl diff does, with 2, a wrong flag included: 1 says
// that the objects differ.
func TestDiffErrorStatus(t *testing.T) {
	c := newCluster(t)
	c.Edits()
	for _, args := range [][]string{{"diff", "cm/web", "-o", "json"}, {"diff"}, {"diff", "nope/web"}} {
		if code, _, errOut := c.Run("", args...); code != 2 || !strings.HasPrefix(errOut, "error: ") {
			t.Errorf("%s: exit %d, want 2 and the error:\n%s", args, code, errOut)
		}
	}
}
