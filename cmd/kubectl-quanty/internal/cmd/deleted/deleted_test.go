package deleted

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
)

// deleted lists what was deleted and is still gone, oldest deletion
// first: its last revision, and the revision restore takes (from before
// a deletion that took a while began); -A everywhere, TYPE one type,
// --since the recent ones; what the caller may not list is named.
func TestDeleted(t *testing.T) {
	c := cmdtesting.New(t, NewCmdDeleted)
	// shop exists before what it holds: the aggregated API shows a
	// namespace's history from its making on to a caller allowed in it
	// alone (ADR-036).
	c.Put("/registry/namespaces/shop", []byte("{}"))
	a := cmdtesting.ConfigMap("shop", "a", "ua", nil)
	ra := c.Put("/registry/configmaps/shop/a", cmdtesting.Encode(t, a))
	a.Finalizers = []string{"example.com/keep"}
	a.DeletionTimestamp = &cmdtesting.Created
	rDeleting := c.Put("/registry/configmaps/shop/a", cmdtesting.Encode(t, a))
	c.Put("/registry/configmaps/shop/kept", cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "kept", "uk", nil)))
	rOther := c.Put("/registry/configmaps/other/b", cmdtesting.Encode(t, cmdtesting.ConfigMap("other", "b", "ub", nil)))
	c.Put("/registry/pods/shop/p", cmdtesting.Encode(t, cmdtesting.Pod("p", "up", "Running", true, 0, nil)))
	dA := c.Del("/registry/configmaps/shop/a")
	dB := c.Del("/registry/configmaps/other/b")
	dP := c.Del("/registry/pods/shop/p")

	out := c.OK("deleted")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAMESPACE   NAME") ||
		!cmdtesting.HasLine(fmt.Sprintf(`^shop +configmap/a +\S+ ago +\S+ +%d +%d$`, rDeleting, ra), lines[1]) ||
		!cmdtesting.HasLine(fmt.Sprintf(`^shop +pod/p +\S+ ago +\S+ +%d +%d$`, dP-3, dP-3), lines[2]) {
		t.Fatalf("deleted:\n%s", out)
	}
	var doc struct{ Deleted []Row }
	if err := json.Unmarshal([]byte(c.OK("deleted", "-A", "configmaps", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Deleted) != 2 || doc.Deleted[0].DeletedRevision != dA || doc.Deleted[1].Key != "/registry/configmaps/other/b" ||
		doc.Deleted[1].LastRevision != rOther || doc.Deleted[1].DeletedRevision != dB || doc.Deleted[1].Type != "configmap" || doc.Deleted[1].DeletedTime == "" {
		t.Fatalf("deleted -A configmaps -o json = %+v", doc.Deleted)
	}
	if code, out, errOut := c.Run("", "deleted", "--since", "now"); code != 0 || out != "" || errOut != "No deleted objects found.\n" {
		t.Errorf("deleted --since now: exit %d\n%s%s", code, out, errOut)
	}
	c.Grants.Allow["viewer"] = []string{"list configmaps in namespace shop", "list logs.quanty.quantyroot.io in namespace shop"}
	code, out, errOut := c.Run("", "deleted", "--as", "viewer")
	if code != 0 || !strings.Contains(out, "configmap/a") || strings.Contains(out, "pod/p") || !strings.Contains(errOut, "Skipped pods: forbidden") {
		t.Errorf("deleted as a viewer of configmaps: exit %d\n%s%s\nasked:\n%s", code, out, errOut, strings.Join(c.Grants.Asked(), "\n"))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cm", "pods"}, "want at most one TYPE"},
		{[]string{"-A", "-n", "shop"}, "-A and -n exclude each other"},
		{[]string{"-o", "wide"}, `--output "wide"`},
		{[]string{"--since", "soon"}, `--since: time "soon"`},
	} {
		if code, _, errOut := c.Run("", append([]string{"deleted"}, tc.args...)...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("deleted %q: exit %d, want %q in:\n%s", tc.args, code, tc.want, errOut)
		}
	}
}
