package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// HistoryTopCommand is `quantykube history top`.
type HistoryTopCommand struct{}

// Usage is history top's help.
func (HistoryTopCommand) Usage() string {
	return "quantykube history top [--by bytes|revisions] [--limit N]"
}

// topTimeout is --command-timeout's default for top: it reads the sizes
// of the whole log, about a second per million rows on SQLite.
const topTimeout = 2 * time.Minute

// Run prints what fills the retained history: the resource types, the
// namespaces and the keys holding the most of it.
func (c HistoryTopCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var conn connFlags
	conn.register(fs)
	by := fs.String("by", "bytes", "what orders the lists: bytes or revisions")
	limit := fs.Int64("limit", 10, "rows per list (at most 1000)")
	conn.commandTimeout = topTimeout
	fs.Lookup("command-timeout").DefValue = topTimeout.String()
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("history top takes no arguments, got %q", fs.Args())
	}
	if err := conn.check(); err != nil {
		return err
	}
	hc, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer hc.Close()
	ctx, cancel := context.WithTimeout(ctx, hc.timeout)
	defer cancel()
	resp, err := hc.client.Top(ctx, &historypb.TopRequest{By: *by, Limit: *limit})
	if err != nil {
		return hc.explain(err)
	}
	if conn.output == "json" {
		return writeJSON(stdout, resp)
	}
	return writeTopTable(stdout, resp, time.Now())
}

// writeTopTable prints the three lists, each aligned on its own, then
// the whole log.
func writeTopTable(w io.Writer, resp *historypb.TopResponse, now time.Time) error {
	tw := newTable(w)
	for _, list := range []struct {
		title string
		rows  []*historypb.Usage
		name  func(string) string
	}{
		{"TYPE", resp.GetTypes(), func(s string) string { return s }},
		{"NAMESPACE", resp.GetNamespaces(), func(s string) string { return s }},
		{"KEY", resp.GetKeys(), func(s string) string { return displayKey([]byte(s)) }},
	} {
		fmt.Fprintf(tw, "%s\tBYTES\tREVISIONS\tLAST HOUR\tOLDEST\n", list.title)
		for _, u := range list.rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", list.name(u.GetName()), formatBytes(u.GetBytes()), u.GetRevisions(), u.GetRevisionsLastHour(), age(now, u.GetOldestUnixMs()))
		}
		// A line of its own between the lists (a cell would pad it).
		fmt.Fprintln(tw)
	}
	t := resp.GetTotal()
	fmt.Fprintf(tw, "All keys: %s in %d revisions, %d of them in the last hour; the oldest is %s old (revision %d).\n",
		formatBytes(t.GetBytes()), t.GetRevisions(), t.GetRevisionsLastHour(), age(now, t.GetOldestUnixMs()), resp.GetHeaderRevision())
	return tw.Flush()
}

// age is how long before now unixMs was, as kubectl prints ages.
func age(now time.Time, unixMs int64) string {
	if unixMs == 0 {
		return "-"
	}
	d := now.Sub(time.UnixMilli(unixMs)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
