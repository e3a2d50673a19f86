package cmd_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/deleted"
	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// rawControl is the first control character (but \n and \t) or byte
// that is not UTF-8 in s, "" when there is none.
func rawControl(s string) string {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") || unicode.IsControl(r) && r != '\n' && r != '\t' {
			return s[i:min(len(s), i+8)]
		}
	}
	return ""
}

// What the cluster supplies reaches the terminal escaped: names from the
// store in tables, the reasons undelete gives (an owner's name), values
// in diffs, in every output format.
func TestControlCharactersEscaped(t *testing.T) {
	c := newCluster(t)
	evil := "evil\x1b]0;pwned\x07\r\u009b2J"
	escaped := `evil\x1b]0;pwned\x07\x0d\u009b2J`
	nsKey, cmKey := "/registry/namespaces/shop", "/registry/configmaps/shop/"+evil
	c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(false)))
	c.Put(cmKey, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", evil, "uid-evil", map[string]string{"color\x1b[8m": "blue\x1b[2K"})))
	c.Put(cmKey, cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", evil, "uid-evil", map[string]string{"color\x1b[8m": "red\x1b[2K"})))
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: cmdtesting.Meta("shop", "p", "uid-p", cmdtesting.ControlledBy("ReplicaSet", "apps/v1", evil, "uid-rs"))}
	c.Put("/registry/pods/shop/p", cmdtesting.Encode(t, pod))

	check := func(what, printed string, want ...string) {
		t.Helper()
		if c := rawControl(printed); c != "" {
			t.Errorf("%s printed a raw control character at %q:\n%q", what, c, printed)
		}
		for _, w := range want {
			if !strings.Contains(printed, w) {
				t.Errorf("%s: no %q in:\n%s", what, w, printed)
			}
		}
	}
	// The built-in diff, painted as on a terminal: only its own colors
	// are raw.
	var term strings.Builder
	c.Color = true
	code := c.RunTo(strings.NewReader(""), &term, &term, "diff", "--key", cmKey)
	c.Color = false
	if code != 1 {
		t.Fatalf("diff: exit %d\n%s", code, term.String())
	}
	check("diff on a terminal", strings.NewReplacer("\x1b[1m", "", "\x1b[31m", "", "\x1b[32m", "", "\x1b[36m", "", "\x1b[0m", "").Replace(term.String()),
		`red\e[2K"`)
	_, out, errOut := c.Run("", "log", "--key", cmKey)
	check("log", out+errOut, `data["color\x1b[8m"]`)

	c.Put(nsKey, cmdtesting.Encode(t, cmdtesting.Namespace(true)))
	c.Del(cmKey)
	c.Del("/registry/pods/shop/p")
	c.Del(nsKey)
	_, out, errOut = c.Run("", "deleted")
	check("deleted", out+errOut, "configmap/"+escaped)
	// The columns line up around the escaped name.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines[1:] {
		if at := strings.Index(lines[0], "DELETED"); len(l) < at || l[at-1] != ' ' || l[at] == ' ' {
			t.Errorf("deleted: the DELETED column is not at %d in row %q:\n%s", at, l, out)
		}
	}
	for _, format := range []string{"json", "yaml"} {
		_, out, errOut := c.Run("", "deleted", "-o", format)
		check("deleted -o "+format, out+errOut)
		var doc struct{ Deleted []deleted.Row }
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil || len(doc.Deleted) != 2 || doc.Deleted[0].Name != evil {
			t.Errorf("deleted -o %s reads back as %+v (%v)", format, doc.Deleted, err)
		}
	}
	_, out, errOut = c.Run("", "undelete", "namespace", "shop", "--dry-run")
	check("undelete --dry-run", out+errOut, "configmap/"+escaped, "(owner ReplicaSet/"+escaped+")")
	_, out, errOut = c.Run("", "undelete", "namespace", "shop", "--dry-run", "-o", "json")
	check("undelete --dry-run -o json", out+errOut)
	if !json.Valid([]byte(out)) {
		t.Errorf("undelete -o json is not JSON:\n%s", out)
	}
}
