package terminal

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Screen is a writer for a terminal, or for whatever stands in its place
// (a pipe, a file): what is written to it is escaped by Escape. Each
// write must hold whole characters, as fmt, tabwriter (whole cells) and
// the encoders' single writes do.
type Screen struct{ raw io.Writer }

// NewScreen is w as a Screen; a Screen is returned as it is.
func NewScreen(w io.Writer) *Screen {
	if sc, ok := w.(*Screen); ok {
		return sc
	}
	return &Screen{raw: w}
}

func (sc *Screen) Write(p []byte) (int, error) {
	if _, err := sc.raw.Write(Escape(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// RawOf is the writer under w, for output that is not the cluster's: an
// external diff program's (whose input, the files the plugin writes, is
// escaped already), which may paint its own colors.
func RawOf(w io.Writer) io.Writer {
	if sc, ok := w.(*Screen); ok {
		return sc.raw
	}
	return w
}

// Tabular is a table on a writer, padded with spaces by a tabwriter: its
// text is escaped before the tabwriter measures its cells, so that the
// columns line up around an escaped name. Flush it at the end.
type Tabular struct {
	io.Writer
	tw *tabwriter.Writer
}

// NewTabular is a table on w whose columns are padding spaces apart.
func NewTabular(w io.Writer, padding int) *Tabular {
	tw := tabwriter.NewWriter(RawOf(w), 0, 8, padding, ' ', 0)
	return &Tabular{Writer: &Screen{raw: tw}, tw: tw}
}

// Flush writes the table.
func (t *Tabular) Flush() error { return t.tw.Flush() }

// WriteDiff prints a unified diff on w. With color, as git paints one: the
// file header bold, hunk headers cyan, removed lines red, added lines
// green; the text of each line escaped, the colors not.
func WriteDiff(w io.Writer, diff string, color bool) error {
	sc, ok := w.(*Screen)
	if !ok || !color {
		_, err := io.WriteString(w, diff)
		return err
	}
	var b bytes.Buffer
	for i, line := range strings.Split(strings.TrimSuffix(diff, "\n"), "\n") {
		if diff == "" {
			break
		}
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
		text := Escape([]byte(line))
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
