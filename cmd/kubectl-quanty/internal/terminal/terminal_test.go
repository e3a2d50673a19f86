package terminal

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\n\tindented\n": "plain text\n\tindented\n",
		"red \x1b[31mtext\x1b[0m":  `red \x1b[31mtext\x1b[0m`,
		"hidden\rshown":            `hidden\x0dshown`,
		"title \x1b]0;pwned\x07":   `title \x1b]0;pwned\x07`,
		"nul\x00 bs\x08 del\x7f":   `nul\x00 bs\x08 del\x7f`,
		"csi \u009b2J nel \u0085":  `csi \u009b2J nel \u0085`,
		"not utf-8 \x9b\xff":       `not utf-8 \x9b\xff`,
		"été, 日本, עברית, 👩💻":       "été, 日本, עברית, 👩💻",
		// What reorders or hides text is shown.
		"restore\u202eeteled":                 `restore\u202eeteled`,
		"a\u2066b\u2067c\u2068d\u2069e\u202a": `a\u2066b\u2067c\u2068d\u2069e\u202a`,
		"zw\u200b\u200c\u200d\u200e\u200f":    `zw\u200b\u200c\u200d\u200e\u200f`,
		"line\u2028para\u2029bom\ufeff":       `line\u2028para\u2029bom\ufeff`,
		"soft\u00adhyphen tag\U000e0041":      `soft\u00adhyphen tag\U000e0041`,
		"vs\ufe0f filler\u3164":               `vs\ufe0f filler\u3164`,
	} {
		if got := EscapeString(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every character of the classes Invisible names is one, and no letter,
// digit, mark of a script, symbol or space is.
func TestInvisible(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		want := unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
		if got := Invisible(r); got != want {
			t.Fatalf("Invisible(%U) = %v, want %v", r, got, want)
		}
	}
	for _, r := range "aé日ע😀 0-\t\n" {
		if Invisible(r) {
			t.Errorf("Invisible(%U)", r)
		}
	}
}

// Dangerous is the first raw control character (but \n and \t), invisible
// character or byte that is not UTF-8 in s, "" when there is none.
func Dangerous(s string) string {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") || unicode.IsControl(r) && r != '\n' && r != '\t' || Invisible(r) {
			return s[i:min(len(s), i+8)]
		}
	}
	return ""
}

// every is one character of each kind a Screen escapes, and its escapes'
// look-alikes as plain text.
const every = "\x00\x01\x1b[2J\r\x7f\u0085\u009b\u00ad\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u2028\u2029" +
	"\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff\ufe0f\U000e0001\U000e0041\U000e0100" +
	`\x01000041 \x01 \\x01 \u202e`

// JSON and YAML escape every character a Screen would, in their own
// syntax, and read back as what was written, keys and values, on one line
// or several, long or short.
func TestRenderEscapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	runes := []rune(every + "aé日 \n\t\"'#:-{}[]?|>")
	for i := range 400 {
		var k, v strings.Builder
		for range rng.IntN(40) {
			k.WriteRune(runes[rng.IntN(len(runes))])
		}
		for range rng.IntN(200) {
			v.WriteRune(runes[rng.IntN(len(runes))])
		}
		obj := map[string]any{k.String(): v.String(), "list": []any{v.String(), k.String(), int64(i)}, "plain": "text"}
		if i == 0 {
			obj = map[string]any{every: every, "list": []any{every}, "plain": "text"}
		}
		for _, format := range []string{"json", "yaml"} {
			b, err := Render(obj, format)
			if err != nil {
				t.Fatalf("Render(%q, %s): %v", obj, format, err)
			}
			if d := Dangerous(string(b)); d != "" {
				t.Fatalf("-o %s holds %q raw:\n%s", format, d, b)
			}
			var back map[string]any
			unmarshal := func(b []byte, v any) error { return yaml.Unmarshal(b, v) }
			if format == "json" {
				unmarshal = json.Unmarshal
			}
			if err := unmarshal(b, &back); err != nil {
				t.Fatalf("-o %s of %q does not read back: %v\n%s", format, obj, err, b)
			}
			want, _ := json.Marshal(obj)
			got, _ := json.Marshal(back)
			if !bytes.Equal(got, want) {
				t.Fatalf("-o %s reads back as\n%s\nwant\n%s\ntext:\n%s", format, got, want, b)
			}
		}
	}
}

// kubectl's YAML is kept where there is nothing to escape: lists at their
// key's indentation, multi-line strings as literal blocks.
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
	sc.Write([]byte("x\u202ey\x1b\n"))
	if b.String() != `x\u202ey\x1b`+"\n" {
		t.Errorf("Screen wrote %q", b.String())
	}
	b.Reset()
	tw := NewTabular(sc, 2)
	tw.Write([]byte("NAME\tAGE\nab\u202ecd\t1\nx\t2\n"))
	tw.Flush()
	if b.String() != "NAME        AGE\n"+`ab\u202ecd`+"  1\nx           2\n" {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	if err := WriteDiff(sc, "--- a\n+++ b\n@@ -1 +1 @@\n-x\u202e\n+y\n z\n", true); err != nil {
		t.Fatal(err)
	}
	want := "\x1b[1m--- a\x1b[0m\n\x1b[1m+++ b\x1b[0m\n\x1b[36m@@ -1 +1 @@\x1b[0m\n\x1b[31m-x\\u202e\x1b[0m\n\x1b[32m+y\x1b[0m\n z\n"
	if b.String() != want {
		t.Errorf("WriteDiff painted %q, want %q", b.String(), want)
	}
}
