package terminal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Render prints obj as kubectl's -o yaml or -o json do, with every
// control character escaped (EscapeJSON). YAML is made from the JSON as
// sigs.k8s.io/yaml.Marshal makes it, but from the escaped JSON: the YAML
// parser it goes through refuses DEL and C1 characters raw.
func Render(obj any, format string) ([]byte, error) {
	switch format {
	case "json":
		b, err := json.MarshalIndent(obj, "", "    ")
		return append(EscapeJSON(b), '\n'), err
	case "yaml":
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		return yaml.JSONToYAML(EscapeJSON(b))
	}
	return nil, fmt.Errorf("unknown output format %q", format)
}

// EscapeJSON escapes in JSON text the control characters that
// encoding/json leaves as they are, DEL and C1 (U+007F to U+009F), as
// \u007f to \u009f, which JSON reads as the same characters: in JSON
// they can only be inside strings. (It escapes C0 itself; YAML's encoder
// double-quotes and escapes every control character.)
func EscapeJSON(b []byte) []byte {
	if bytes.IndexByte(b, 0x7f) < 0 && !hasC1(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
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

// hasC1 reports whether UTF-8 text b holds a C1 control (0xc2 0x80 to
// 0xc2 0x9f).
func hasC1(b []byte) bool {
	for i := bytes.IndexByte(b, 0xc2); i >= 0 && i+1 < len(b); {
		if b[i+1] >= 0x80 && b[i+1] <= 0x9f {
			return true
		}
		j := bytes.IndexByte(b[i+1:], 0xc2)
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}
