package main

// The output of `quantykube history`: tables for people, protojson for
// scripts. TIME arguments are pkg/timearg's.

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/timearg"
	"github.com/quantyroot/quantykube/proto/historypb"
)

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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.GetRevision(), timearg.Format(e.GetUnixMs(), loc),
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
