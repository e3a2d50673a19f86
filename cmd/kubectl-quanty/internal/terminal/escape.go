// Package terminal is the plugin's output layer. Most of what the plugin
// prints comes from the cluster: names and keys from the store, values in
// diffs, messages of kube-apiserver and of kubectl. A control character
// among them, written raw to a terminal, is a command to it: \r and ESC [
// rewrite what is on the screen (a diff line can hide itself), OSC
// sequences set the title or, on some terminals, the clipboard. So every
// byte the plugin writes goes through a Screen, which escapes them; the
// only raw control sequences are the colors the Screen paints itself.
package terminal

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Escape is b as it may reach a terminal: each control character
// (Unicode's class Cc: C0, DEL and C1) but \n and \t becomes \x1b (below
// 0x80) or \u009b (from 0x80 on), and each byte that is not part of a
// UTF-8 character \xNN (a terminal that reads 8-bit bytes takes 0x9b for
// CSI). Everything else is kept: letters of any script, and the format
// characters emoji and right-to-left text are made of. b itself is
// returned when there is nothing to escape.
func Escape(b []byte) []byte {
	i := 0
	for i < len(b) && (b[i] >= 0x20 && b[i] < 0x7f || b[i] == '\n' || b[i] == '\t') {
		i++
	}
	if i == len(b) {
		return b
	}
	out := append(make([]byte, 0, len(b)+16), b[:i]...)
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != 0x7f || c == '\n' || c == '\t' {
				out = append(out, c)
			} else {
				out = fmt.Appendf(out, `\x%02x`, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = fmt.Appendf(out, `\x%02x`, c)
		case unicode.IsControl(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// EscapeString is Escape of a string.
func EscapeString(s string) string { return string(Escape([]byte(s))) }
