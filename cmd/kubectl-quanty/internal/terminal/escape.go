// Package terminal is the plugin's output layer. Most of what the plugin
// prints comes from the cluster: names and keys from the store, values in
// diffs, messages of kube-apiserver and of kubectl. Two kinds of
// characters among them are dangerous on a screen:
//
//   - control characters (Unicode's Cc: C0, DEL, C1), which a terminal
//     reads as commands: \r and ESC [ rewrite what is on the screen (a diff
//     line can hide itself), OSC sequences set the title or, on some
//     terminals, the clipboard;
//   - characters Unicode says are rendered invisibly or that reorder the
//     text around them (Invisible): the bidirectional controls (U+202A to
//     U+202E, U+2066 to U+2069) can make a line of a plan read as another
//     (a delete shown as a restore), and zero-width characters, the BOM,
//     tag characters and variation selectors hide text inside a name.
//
// So every byte the plugin writes goes through a Screen, which shows them
// as escapes (\x1b, \u202e); the only raw control sequences are the colors
// the Screen paints itself. -o json and -o yaml escape them in their own
// syntax (Render), so that they read back as what was stored.
package terminal

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Invisible reports whether r is a character that Unicode renders
// invisibly, or that reorders the text around it: the format characters
// (category Cf: bidirectional controls, zero-width space, joiners and
// marks, the BOM, soft hyphen, tag characters, ...), the line and
// paragraph separators (Zl, Zp: a line break to some terminals and
// editors, none to others), and the rest of Unicode's default-ignorable
// code points (variation selectors, Hangul fillers, the combining
// grapheme joiner), which can carry text no one sees.
func Invisible(r rune) bool {
	if r < 0xad {
		return false
	}
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// Escape is b as it may reach a terminal: each control character but \n
// and \t becomes \x1b (below 0x80) or \u009b (from 0x80 on), each
// invisible character (Invisible) \u202e (\U000e0041 beyond U+FFFF), and
// each byte that is not part of a UTF-8 character \xNN (a terminal that
// reads 8-bit bytes takes 0x9b for CSI). Letters of any script and emoji
// are kept; b itself is returned when there is nothing to escape.
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
		case unicode.IsControl(r) || Invisible(r):
			out = appendEscape(out, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// appendEscape appends r as \uXXXX, or \UXXXXXXXX beyond the BMP: the
// escapes Go, YAML and most languages read.
func appendEscape(out []byte, r rune) []byte {
	if r > 0xffff {
		return fmt.Appendf(out, `\U%08x`, r)
	}
	return fmt.Appendf(out, `\u%04x`, r)
}

// EscapeString is Escape of a string.
func EscapeString(s string) string { return string(Escape([]byte(s))) }
