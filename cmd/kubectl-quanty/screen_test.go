package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func TestEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\tindented\n":       "plain text\n\tindented\n",
		"red \x1b[31mtext\x1b[0m":        `red \x1b[31mtext\x1b[0m`,
		"hidden\rshown":                  `hidden\x0dshown`,
		"title \x1b]0;pwned\x07":         `title \x1b]0;pwned\x07`,
		"nul\x00 bs\x08 del\x7f":         `nul\x00 bs\x08 del\x7f`,
		"csi \u009b2J nel \u0085":        `csi \u009b2J nel \u0085`,
		"not utf-8 \x9b\xff":             `not utf-8 \x9b\xff`,
		"été, 日本, עברית\u202e, 👩\u200d💻": "été, 日本, עברית\u202e, 👩\u200d💻",
	} {
		if got := string(escapeControls([]byte(in))); got != want {
			t.Errorf("escapeControls(%q) = %q, want %q", in, got, want)
		}
	}
}

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

// JSON and YAML output escape every control character, and read back as
// what was written.
func TestMachineOutputEscapes(t *testing.T) {
	obj := map[string]any{"k\x1b[2J": "v\r\x7f\u009b\u0085\x00", "ok": "é\t日本"}
	for _, format := range []string{"json", "yaml"} {
		b, err := render(obj, format)
		if err != nil {
			t.Fatal(err)
		}
		if c := rawControl(string(b)); c != "" {
			t.Errorf("-o %s holds a raw control character at %q:\n%s", format, c, b)
		}
		var back map[string]any
		if err := yaml.Unmarshal(b, &back); err != nil || back["k\x1b[2J"] != obj["k\x1b[2J"] || back["ok"] != obj["ok"] {
			t.Errorf("-o %s reads back as %q (%v), want %q", format, back, err, obj)
		}
	}
}

// What the cluster supplies reaches the terminal escaped: names from the
// store in tables, the reasons undelete gives (an owner's name), values
// in diffs, in every output format.
func TestControlCharactersEscaped(t *testing.T) {
	c := newCluster(t)
	evil := "evil\x1b]0;pwned\x07\r\u009b2J"
	escaped := `evil\x1b]0;pwned\x07\x0d\u009b2J`
	nsKey, cmKey := "/registry/namespaces/shop", "/registry/configmaps/shop/"+evil
	c.put(nsKey, encode(t, namespace(false)))
	c.put(cmKey, encode(t, configMap("shop", evil, "uid-evil", map[string]string{"color\x1b[8m": "blue\x1b[2K"})))
	c.put(cmKey, encode(t, configMap("shop", evil, "uid-evil", map[string]string{"color\x1b[8m": "red\x1b[2K"})))
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: meta("shop", "p", "uid-p", controlledBy("ReplicaSet", "apps/v1", evil, "uid-rs"))}
	c.put("/registry/pods/shop/p", encode(t, pod))

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
	p := &plugin{in: strings.NewReader(""), out: &term, errOut: &term, now: time.Now, loc: time.UTC, outIsTerminal: true}
	if code := p.run(t.Context(), []string{"diff", "--key", cmKey}); code != 1 {
		t.Fatalf("diff: exit %d\n%s", code, term.String())
	}
	check("diff on a terminal", strings.NewReplacer("\x1b[1m", "", "\x1b[31m", "", "\x1b[32m", "", "\x1b[36m", "", "\x1b[0m", "").Replace(term.String()),
		`red\e[2K"`)
	_, out, errOut := c.run("", "log", "--key", cmKey)
	check("log", out+errOut, `data["color\x1b[8m"]`)

	c.put(nsKey, encode(t, namespace(true)))
	c.del(cmKey)
	c.del("/registry/pods/shop/p")
	c.del(nsKey)
	_, out, errOut = c.run("", "deleted")
	check("deleted", out+errOut, "configmap/"+escaped)
	// The columns line up around the escaped name.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines[1:] {
		if at := strings.Index(lines[0], "DELETED"); len(l) < at || l[at-1] != ' ' || l[at] == ' ' {
			t.Errorf("deleted: the DELETED column is not at %d in row %q:\n%s", at, l, out)
		}
	}
	for _, format := range []string{"json", "yaml"} {
		_, out, errOut := c.run("", "deleted", "-o", format)
		check("deleted -o "+format, out+errOut)
		var doc struct{ Deleted []deletedRow }
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil || len(doc.Deleted) != 2 || doc.Deleted[0].Name != evil {
			t.Errorf("deleted -o %s reads back as %+v (%v)", format, doc.Deleted, err)
		}
	}
	_, out, errOut = c.run("", "undelete", "namespace", "shop", "--dry-run")
	check("undelete --dry-run", out+errOut, "configmap/"+escaped, "(owner ReplicaSet/"+escaped+")")
	_, out, errOut = c.run("", "undelete", "namespace", "shop", "--dry-run", "-o", "json")
	check("undelete --dry-run -o json", out+errOut)
	if !json.Valid([]byte(out)) {
		t.Errorf("undelete -o json is not JSON:\n%s", out)
	}
}
