package main

// Parsing of TIME arguments and the output of `quantykube history`: tables
// for people, protojson for scripts.

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// timeLayout is RFC 3339 with milliseconds, the precision of the store's
// commit times, so a printed time can be passed back to --at or --since.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// localLayouts are accepted without a zone and read in the local zone.
var localLayouts = []string{
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
}

// relDays matches a relative time with a day component: -2d, -1d12h.
var relDays = regexp.MustCompile(`^([+-])(\d+)d(.*)$`)

// parseTime reads a TIME argument: an RFC 3339 time (2024-05-01T12:00:00Z,
// fractional seconds allowed), a local date-time without a zone
// (2024-05-01 12:00:00), "now", or a signed duration relative to now
// (-15m, -2h, -1h30m, -2d, +5m).
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, errors.New("empty time")
	case s == "now":
		return now, nil
	case s[0] == '-' || s[0] == '+':
		d, err := parseRelative(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("time %q: %v (want RFC 3339 or a relative time like -15m, -1h30m, -2d)", s, err)
		}
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range localLayouts {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			return t, nil
		}
	}
	if _, err := time.ParseDuration(s); err == nil {
		return time.Time{}, fmt.Errorf("time %q: a relative time needs a sign: -%s means %s ago", s, s, s)
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2024-05-01T12:00:00Z) or a relative time like -15m, -1h30m, -2d", s)
}

// parseRelative parses a signed Go duration, with an optional leading
// number of days.
func parseRelative(s string) (time.Duration, error) {
	var days time.Duration
	if m := relDays.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[2], 10, 32)
		if err != nil || n > 100000 {
			return 0, fmt.Errorf("bad day count %q", m[2])
		}
		days = time.Duration(n) * 24 * time.Hour
		rest := time.Duration(0)
		if m[3] != "" {
			if m[3][0] == '-' || m[3][0] == '+' {
				return 0, errors.New("one sign only")
			}
			if rest, err = time.ParseDuration(m[3]); err != nil {
				return 0, err
			}
		}
		d := days + rest
		if m[1] == "-" {
			d = -d
		}
		return d, nil
	}
	if len(s) < 2 || s[1] == '-' || s[1] == '+' {
		return 0, errors.New("one sign only")
	}
	return time.ParseDuration(s)
}

// timeToUnixMs converts a TIME for a request; 0 would mean "now" to the
// server, so times at or before the epoch are refused.
func timeToUnixMs(t time.Time) (int64, error) {
	ms := t.UnixMilli()
	if ms <= 0 {
		return 0, fmt.Errorf("time %s is not after 1970-01-01T00:00:00Z", t.Format(time.RFC3339))
	}
	return ms, nil
}

// formatTime renders a commit time in RFC 3339 with milliseconds in loc.
func formatTime(unixMs int64, loc *time.Location) string {
	if unixMs == 0 {
		return "-"
	}
	return time.UnixMilli(unixMs).In(loc).Format(timeLayout)
}

// entryType names a Log entry: CREATE when it made the key (version 1),
// DELETE for a delete, PUT for every other write.
func entryType(e *historypb.LogEntry) string {
	switch {
	case e.GetDeleted() != 0:
		return "DELETE"
	case e.GetKv().GetVersion() == 1:
		return "CREATE"
	default:
		return "PUT"
	}
}

// maxSummaryRunes bounds the value column of a table.
const maxSummaryRunes = 40

// summarizeValue renders a value for a table: text as itself (line breaks
// and tabs as spaces), cut at maxSummaryRunes; anything else as its
// printable prefix, if any, and its size.
func summarizeValue(v []byte) string {
	if len(v) == 0 {
		return `""`
	}
	var b strings.Builder
	runes, i := 0, 0
	for i < len(v) {
		r, size := utf8.DecodeRune(v[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		switch r {
		case '\n', '\r', '\t':
			r = ' '
		}
		if !unicode.IsPrint(r) {
			break
		}
		if runes == maxSummaryRunes {
			return b.String() + fmt.Sprintf("… (%d bytes)", len(v))
		}
		b.WriteRune(r)
		runes++
		i += size
	}
	if i == len(v) {
		return b.String()
	}
	if prefix := strings.TrimSpace(b.String()); prefix != "" {
		return fmt.Sprintf("%s… (%d bytes)", prefix, len(v))
	}
	return fmt.Sprintf("(%d bytes)", len(v))
}

// displayKey renders a key as itself when it is printable text, else
// Go-quoted.
func displayKey(k []byte) string {
	s := string(k)
	if s == "" {
		return `""`
	}
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// writeLogTable prints Log entries, one line per change, oldest first.
func writeLogTable(w io.Writer, entries []*historypb.LogEntry, loc *time.Location) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "REVISION\tTIME\tTYPE\tKEY\tVALUE")
	for _, e := range entries {
		value := "-"
		if e.GetDeleted() == 0 {
			value = summarizeValue(e.GetKv().GetValue())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.GetRevision(), formatTime(e.GetUnixMs(), loc),
			entryType(e), displayKey(e.GetKv().GetKey()), value)
	}
	return tw.Flush()
}

// kvColumns are the columns of a key's state in the get and restore tables.
func kvColumns(kv *mvccpb.KeyValue) string {
	return fmt.Sprintf("%d\t%d\t%d\t%s", kv.GetCreateRevision(), kv.GetModRevision(), kv.GetVersion(), summarizeValue(kv.GetValue()))
}

// writeGetTable prints the state of key at the revision read.
func writeGetTable(w io.Writer, key []byte, resp *historypb.GetResponse) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "REVISION\tKEY\tSTATE\tCREATE_REV\tMOD_REV\tVERSION\tVALUE")
	if kv := resp.GetKv(); kv != nil {
		fmt.Fprintf(tw, "%d\t%s\tPRESENT\t%s\n", resp.GetRevision(), displayKey(kv.GetKey()), kvColumns(kv))
	} else {
		fmt.Fprintf(tw, "%d\t%s\tABSENT\t-\t-\t-\t-\n", resp.GetRevision(), displayKey(key))
	}
	return tw.Flush()
}

// writeRestoreTable prints what a restore read and wrote.
func writeRestoreTable(w io.Writer, key []byte, resp *historypb.RestoreResponse) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "FROM_REV\tNEW_REV\tTYPE\tKEY\tCREATE_REV\tMOD_REV\tVERSION\tVALUE")
	typ, newRev := "PUT", strconv.FormatInt(resp.GetNewRevision(), 10)
	switch {
	case resp.GetNewRevision() == 0:
		typ, newRev = "UNCHANGED", "-"
	case resp.GetKv() == nil:
		typ = "DELETE"
	}
	if kv := resp.GetKv(); kv != nil {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", resp.GetRevision(), newRev, typ, displayKey(kv.GetKey()), kvColumns(kv))
	} else {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t-\t-\t-\t(absent)\n", resp.GetRevision(), newRev, typ, displayKey(key))
	}
	return tw.Flush()
}

// jsonOptions: the spec's field names (unix_ms, prev_kv, new_revision),
// every field present, int64 as strings and bytes as base64 as protojson
// has them.
var jsonOptions = protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}

// writeJSON prints one response as one JSON document.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := jsonOptions.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
