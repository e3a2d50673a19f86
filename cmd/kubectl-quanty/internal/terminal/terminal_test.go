package terminal

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

func TestEscape(t *testing.T) {
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
		if got := EscapeString(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
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
		b, err := Render(obj, format)
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

// kubectl's YAML: lists at their key's indentation, multi-line strings as
// literal blocks.
func TestRenderYAMLAsKubectl(t *testing.T) {
	obj := map[string]any{"data": map[string]any{"a": "x\ny\n", "b": "2"}, "items": []any{"one", map[string]any{"k": "v"}}}
	b, err := Render(obj, "yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := yaml.Marshal(obj)
	if string(b) != string(want) {
		t.Fatalf("Render yaml:\n%s\nsigs.k8s.io/yaml:\n%s", b, want)
	}
}

// A Screen escapes, the table aligns around escapes, and WriteDiff paints
// only its own colors.
func TestScreen(t *testing.T) {
	var b bytes.Buffer
	sc := NewScreen(&b)
	if NewScreen(sc) != sc {
		t.Error("NewScreen of a Screen is another Screen")
	}
	sc.Write([]byte("xy\x1b\n"))
	if b.String() != `xy\x1b`+"\n" {
		t.Errorf("Screen wrote %q", b.String())
	}
	b.Reset()
	tw := NewTabular(sc, 2)
	tw.Write([]byte("NAME\tAGE\nab\x1bcd\t1\nx\t2\n"))
	tw.Flush()
	if b.String() != "NAME      AGE\n"+`ab\x1bcd`+"  1\nx         2\n" {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	if err := WriteDiff(sc, "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\x1b[2K\n z\n", true); err != nil {
		t.Fatal(err)
	}
	want := "\x1b[1m--- a\x1b[0m\n\x1b[1m+++ b\x1b[0m\n\x1b[36m@@ -1 +1 @@\x1b[0m\n\x1b[31m-x\x1b[0m\n\x1b[32m+y\\x1b[2K\x1b[0m\n z\n"
	if b.String() != want {
		t.Errorf("WriteDiff painted %q, want %q", b.String(), want)
	}
}
