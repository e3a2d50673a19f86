package main

// The output layer. Most of what the plugin prints comes from the
// cluster: names and keys from the store, values in diffs, messages of
// kube-apiserver and of kubectl. A control character among them, written
// raw to a terminal, is a command to it: \r and ESC [ rewrite what is on
// the screen (a diff line can hide itself), OSC sequences set the title
// or, on some terminals, the clipboard. So every byte the plugin writes
// goes through a screen, which escapes them; the only raw control
// sequences are the colors the screen paints itself.

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// escapeControls is b as it may reach a terminal: each control character
// (Unicode's class Cc: C0, DEL and C1) but \n and \t becomes \x1b (below
// 0x80) or \u009b (from 0x80 on), and each byte that is not part of a
// UTF-8 character \xNN (a terminal that reads 8-bit bytes takes 0x9b for
// CSI). Everything else is kept: letters of any script, and the format
// characters emoji and right-to-left text are made of. b itself is
// returned when there is nothing to escape.
func escapeControls(b []byte) []byte {
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

// screen is a writer for a terminal, or for whatever stands in its place
// (a pipe, a file): what is written to it is escaped by escapeControls.
// Each write must hold whole characters, as fmt, tabwriter (whole cells)
// and the encoders' single writes do.
type screen struct{ raw io.Writer }

// newScreen is w as a screen; a screen is returned as it is.
func newScreen(w io.Writer) *screen {
	if sc, ok := w.(*screen); ok {
		return sc
	}
	return &screen{raw: w}
}

func (sc *screen) Write(p []byte) (int, error) {
	if _, err := sc.raw.Write(escapeControls(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// rawOf is the writer under w, for output that is not the cluster's: an
// external diff program's (whose input, the files the plugin writes, is
// escaped already), which may paint its own colors.
func rawOf(w io.Writer) io.Writer {
	if sc, ok := w.(*screen); ok {
		return sc.raw
	}
	return w
}

// tabular is a table on a writer, padded with spaces by a tabwriter: its
// text is escaped before the tabwriter measures its cells, so that the
// columns line up around an escaped name. Flush it at the end.
type tabular struct {
	io.Writer
	tw *tabwriter.Writer
}

func newTabular(w io.Writer, padding int) *tabular {
	tw := tabwriter.NewWriter(rawOf(w), 0, 8, padding, ' ', 0)
	return &tabular{Writer: &screen{raw: tw}, tw: tw}
}

func (t *tabular) Flush() error { return t.tw.Flush() }

// writeDiff prints a unified diff (unified's text) on w. With color, as
// git paints one: the file header bold, hunk headers cyan, removed lines
// red, added lines green; the text of each line escaped, the colors not.
func writeDiff(w io.Writer, diff string, color bool) error {
	sc, ok := w.(*screen)
	if !ok || !color {
		_, err := io.WriteString(w, diff)
		return err
	}
	var b bytes.Buffer
	for i, line := range splitLines(diff) {
		code := ""
		switch {
		case i < 2:
			code = "1" // --- and +++
		case strings.HasPrefix(line, "@@"):
			code = "36"
		case strings.HasPrefix(line, "-"):
			code = "31"
		case strings.HasPrefix(line, "+"):
			code = "32"
		}
		text := escapeControls([]byte(line))
		if code == "" {
			b.Write(text)
		} else {
			fmt.Fprintf(&b, "\x1b[%sm%s\x1b[0m", code, text)
		}
		b.WriteByte('\n')
	}
	_, err := sc.raw.Write(b.Bytes())
	return err
}

// jsonControls escapes in JSON text the control characters that
// encoding/json leaves as they are, DEL and C1 (U+007F to U+009F), as
// \u007f to \u009f, which JSON reads as the same characters: in JSON
// they can only be inside strings. (It escapes C0 itself; YAML's encoder
// double-quotes and escapes every control character.)
func jsonControls(b []byte) []byte {
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
