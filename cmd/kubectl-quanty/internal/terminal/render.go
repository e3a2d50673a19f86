package terminal

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
)

// Render prints obj as kubectl's -o json or -o yaml do, with every
// character a Screen would escape written as an escape of the format
// itself, so that the text reads back as obj and holds nothing a terminal
// would act on or hide.
func Render(obj any, format string) ([]byte, error) {
	switch format {
	case "json":
		b, err := json.MarshalIndent(obj, "", "    ")
		return append(EscapeJSON(b), '\n'), err
	case "yaml":
		return renderYAML(obj)
	}
	return nil, fmt.Errorf("unknown output format %q", format)
}

// EscapeJSON escapes in JSON text what encoding/json leaves as it is: DEL
// and the C1 controls (U+007F to U+009F), and the invisible characters
// (Invisible) but U+2028 and U+2029, which it escapes itself; each as
// \uXXXX (a surrogate pair beyond U+FFFF), which JSON reads as the same
// character. In JSON text they can only be inside strings. (encoding/json
// escapes C0 itself.)
func EscapeJSON(b []byte) []byte {
	i := 0
	for i < len(b) && b[i] < 0x7f {
		i++
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r > 0xffff && Invisible(r):
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		case r >= 0x7f && r <= 0x9f || Invisible(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// escapeC1 escapes DEL and the C1 controls of JSON text as \u007f to
// \u009f.
func escapeC1(b []byte) []byte {
	i := 0
	for i < len(b) && b[i] < 0x7f {
		i++
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r >= 0x7f && r <= 0x9f {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// YAML: kubectl -o yaml's text is sigs.k8s.io/yaml's, made by go-yaml v2
// from the object's JSON. Its emitter escapes control characters itself
// (it double-quotes the string and writes \e, \x9B), but writes the
// invisible characters raw, in any style, and no option makes it quote
// a string. So before it runs, each invisible character c of a string
// (a key or a value) is replaced by a mark: U+0001, which the emitter can
// only write double-quoted, as \x01, followed by c's code point as six
// hex digits. After it, each \x01HHHHHH is replaced by YAML's own escape
// of c (\u202E, \U000E0041), which reads back as c. So that every \x01 in
// the text is a mark, a U+0001 of the data is marked too, and so is the
// backslash of a text "\x01" in the data (the emitter writes it \\x01,
// which a mark cannot be mistaken for, but only in a double-quoted
// string, and a marked string is one).
const yamlMark = '\x01'

var yamlMarked = regexp.MustCompile(`\\x01([0-9a-f]{6})`)

func renderYAML(obj any) ([]byte, error) {
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	// As sigs.k8s.io/yaml's JSONToYAML: go-yaml reads the JSON (keeping
	// integers integers) and writes it.
	// go-yaml's reader refuses DEL and C1 raw (and surrogate pairs, so
	// only these are escaped here).
	var doc any
	if err := yamlv2.Unmarshal(escapeC1(j), &doc); err != nil {
		return nil, err
	}
	doc, marked := markYAML(doc)
	b, err := yamlv2.Marshal(doc)
	if err != nil || !marked {
		return b, err
	}
	return yamlMarked.ReplaceAllFunc(b, func(m []byte) []byte {
		r, _ := strconv.ParseUint(string(m[len(`\x01`):]), 16, 32)
		if r > 0xffff {
			return fmt.Appendf(nil, `\U%08X`, r)
		}
		return fmt.Appendf(nil, `\u%04X`, r)
	}), nil
}

// markYAML marks the strings of a document go-yaml read (keys too), and
// says whether it marked any.
func markYAML(v any) (any, bool) {
	switch t := v.(type) {
	case string:
		return markString(t)
	case []any:
		marked := false
		for i := range t {
			var m bool
			t[i], m = markYAML(t[i])
			marked = marked || m
		}
		return t, marked
	case map[any]any:
		out := make(map[any]any, len(t))
		marked := false
		for k, val := range t {
			k2, mk := markYAML(k)
			v2, mv := markYAML(val)
			out[k2] = v2
			marked = marked || mk || mv
		}
		return out, marked
	}
	return v, false
}

// markString replaces each invisible character of s, each U+0001 and the
// backslash of each "\x01" by its mark.
func markString(s string) (string, bool) {
	needs := strings.Contains(s, `\x01`)
	for _, r := range s {
		if r == yamlMark || Invisible(r) {
			needs = true
			break
		}
	}
	if !needs {
		return s, false
	}
	var b strings.Builder
	for i, r := range s {
		if r == yamlMark || Invisible(r) || r == '\\' && strings.HasPrefix(s[i:], `\x01`) {
			fmt.Fprintf(&b, "%c%06x", yamlMark, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String(), true
}
