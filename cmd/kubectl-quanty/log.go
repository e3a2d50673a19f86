package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/proto/historypb"
)

var logCmd = &command{
	name:  "log",
	usage: "TYPE/NAME [-n NS] [--since TIME] [--until TIME] [--limit N] [--reverse] [-o table|json|yaml]",
	short: "List an object's revisions: when, what happened, which fields changed",
	long: `Lists every retained change to one object, newest first: its revision, how
long ago and when, what happened (created, updated, deleted, restored) and
which fields changed, as paths (spec.replicas, data.color). A change that
wrote back the exact value of an earlier revision (what restore does) is
"restored", with that revision.
`,
	examples: `
  # The history of a ConfigMap in the current namespace
  kubectl quanty log configmap/web

  # Changes to a Deployment in the last two hours, oldest first
  kubectl quanty log deploy/web -n shop --since 2h --reverse

  # The last five changes of a custom resource, as JSON for a script
  kubectl quanty log widgets.example.com/blue --limit 5 -o json

  # A raw storage key
  kubectl quanty log --key /registry/services/specs/default/kubernetes
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		key := keyFlag(fs)
		since := fs.String("since", "", "only changes at or after TIME (or a duration: 1h means an hour ago)")
		until := fs.String("until", "", "only changes at or before TIME (or a duration ago)")
		limit := fs.Int("limit", 0, "only the N newest changes (0: every change)")
		reverse := fs.Bool("reverse", false, "oldest first")
		out := outputFlag(fs, "table", "json", "yaml")
		return func(ctx context.Context, s *session, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if *limit < 0 {
				return fmt.Errorf("--limit %d: want N >= 0 (0: every change)", *limit)
			}
			t, err := s.target(ctx, args, *key)
			if err != nil {
				return err
			}
			var sinceMs, untilMs int64
			if *since != "" {
				if sinceMs, err = parseSince("since", *since, s.now()); err != nil {
					return err
				}
			}
			if *until != "" {
				if untilMs, err = parseSince("until", *until, s.now()); err != nil {
					return err
				}
			}
			// The whole retained log, even with --since: a restore is told
			// by the earlier revision it wrote back, and a --since before
			// the retention window is not an error.
			entries, err := s.api.log(ctx, &historypb.Request{Key: []byte(t.key)})
			if err != nil {
				return err
			}
			rows := slices.DeleteFunc(logRows(entries), func(r logRow) bool {
				return r.UnixMs < sinceMs || untilMs > 0 && r.UnixMs > untilMs
			})
			if *limit > 0 && len(rows) > *limit {
				rows = rows[len(rows)-*limit:]
			}
			if !*reverse {
				slices.Reverse(rows)
			}
			return s.printLog(t, rows, out.format)
		}
	},
}

// logRow is one change, as log prints it.
type logRow struct {
	Revision     int64    `json:"revision"`
	Time         string   `json:"time"`
	UnixMs       int64    `json:"unixMs"`
	Action       string   `json:"action"`
	RestoredFrom int64    `json:"restoredFrom,omitempty"`
	Changes      []string `json:"changes,omitempty"`
	// Note says why the changes are not known.
	Note string `json:"note,omitempty"`
}

// logRows describes the entries of one key's log, oldest first.
func logRows(entries []*historypb.LogEntry) []logRow {
	written := map[string]int64{} // a value -> the last revision that wrote it
	var rows []logRow
	for _, e := range entries {
		r := logRow{Revision: e.GetRevision(), UnixMs: e.GetUnixMs()}
		cur, prev := e.GetKv(), e.GetPrevKv()
		switch {
		case e.GetDeleted() != 0:
			r.Action = "deleted"
		case written[string(cur.GetValue())] != 0 && (prev == nil || string(prev.GetValue()) != string(cur.GetValue())):
			r.Action, r.RestoredFrom = "restored", written[string(cur.GetValue())]
		case cur.GetVersion() == 1:
			r.Action = "created"
		default:
			r.Action = "updated"
		}
		if r.Action != "deleted" {
			written[string(cur.GetValue())] = r.Revision
		}
		if r.Action == "updated" || r.Action == "restored" && prev != nil {
			r.Changes, r.Note = changesOf(prev, cur)
		}
		rows = append(rows, r)
	}
	return rows
}

// changesOf is the fields a write changed, or why they are not known.
func changesOf(prev, cur interface{ GetValue() []byte }) ([]string, string) {
	if prev == nil {
		return nil, "the state before is no longer retained"
	}
	a, b := decodeValue(prev.GetValue()), decodeValue(cur.GetValue())
	switch {
	case a.Encrypted != "" || b.Encrypted != "":
		return nil, "encrypted at rest"
	case a.Object == nil || b.Object == nil:
		return nil, "not a Kubernetes object"
	}
	return changedFields(a.Object, b.Object), ""
}

func (s *session) printLog(t target, rows []logRow, format string) error {
	if format != "table" {
		for i := range rows {
			rows[i].Time = s.when(rows[i].UnixMs)
		}
		if rows == nil {
			rows = []logRow{}
		}
		doc := map[string]any{"object": t.String(), "key": t.key, "revisions": rows}
		b, err := render(doc, format)
		if err != nil {
			return err
		}
		_, err = s.out.Write(b)
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintf(s.errOut, "No history found for %s.\n", t)
		return nil
	}
	tw := newTabular(s.out, 3)
	fmt.Fprintln(tw, "REVISION\tAGE\tTIME\tACTION\tCHANGES")
	for _, r := range rows {
		action := r.Action
		if r.RestoredFrom != 0 {
			action = fmt.Sprintf("restored (revision %d)", r.RestoredFrom)
		}
		changes := summarize(r.Changes)
		if r.Note != "" {
			changes = "(" + r.Note + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Revision, s.age(r.UnixMs), s.when(r.UnixMs), action, changes)
	}
	return tw.Flush()
}
