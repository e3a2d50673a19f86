package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// defaultSince is changes' window without --since: the last hour, as
// kube-apiserver keeps Events (its --event-ttl), the other place people
// look for what just happened. A longer one is a flag away, and the
// first page of a day of a busy cluster is not what a glance wants.
const defaultSince = "1h"

// watchInterval is how often changes --watch asks for new changes: often
// enough to follow a rollout as it happens, seldom enough that a watching
// terminal costs the store one small page read every two seconds.
const watchInterval = 2 * time.Second

var changesCmd = &command{
	name:  "changes",
	usage: "[TYPE[,TYPE...]] [-n NS | -A] [--since TIME] [--until TIME] [-l SELECTOR] [--reverse] [--limit N] [-w] [-o wide|json|yaml]",
	short: "List every change in a namespace or the cluster: what, when, who",
	long: `Lists every create, update, delete and restore in the window, newest first:
its time, revision, action, the object, its namespace (with -A), the
field manager that made it (from the object's managedFields, where they
say; empty where they do not) and the fields it changed. Without TYPE,
every type you may list, custom resources included, but Events and
Leases (heartbeats, renewed every few seconds), which are left out unless
named. Only what you may list is shown: a type or a namespace you may
not list is left out, whole.

The window is the last hour unless --since says otherwise; --since older
than QuantyKube's retention (--retain, 24h by default) is refused, naming
the oldest time it holds. -l matches the labels the object had at the
change (before it, for a delete). --watch prints the list, then each new
change as it happens, as kubectl get --watch does, until interrupted.
`,
	examples: `
  # What changed in the whole cluster since 3 am
  kubectl quanty changes -A --since 2026-05-01T03:00:00Z

  # Deployments and ConfigMaps changed in shop in the last 15 minutes
  kubectl quanty changes deployments,configmaps -n shop --since 15m

  # Follow changes to the objects labelled app=web as they happen
  kubectl quanty changes -n shop -l app=web --watch
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		all := fs.BoolP("all-namespaces", "A", false, "every namespace, and cluster-scoped types")
		since := fs.String("since", defaultSince, "changes at or after TIME (or a duration: 1h means an hour ago)")
		until := fs.String("until", "", "changes before TIME (or a duration ago); default: now")
		selector := fs.StringP("selector", "l", "", "only objects whose labels matched (as kubectl -l) at the change")
		reverse := fs.Bool("reverse", false, "oldest first")
		limit := fs.Int("limit", 0, "at most N changes (0: every change in the window)")
		watch := fs.BoolP("watch", "w", false, "after the list, print each new change as it happens, until interrupted")
		out := outputFlag(fs, "table", "wide", "json", "yaml")
		return func(ctx context.Context, s *session, args []string) error {
			q, err := s.changesQuery(ctx, args, *all, *since, *until, *selector, *limit)
			if err != nil {
				return err
			}
			if err := out.check(); err != nil {
				return err
			}
			if *watch && *until != "" {
				return errors.New("--watch follows changes from now on: it takes no --until")
			}
			q.req.Descending = !*reverse
			rows, header, err := s.readChanges(ctx, q)
			if err != nil {
				return err
			}
			p := &changesPrinter{s: s, format: out.format, all: *all}
			if err := p.print(rows, true); err != nil {
				return err
			}
			if !*watch {
				return nil
			}
			return s.watchChanges(ctx, q, header, p)
		}
	},
}

// changesQuery is one changes listing: the request and the filters the
// plugin applies itself.
type changesQuery struct {
	req    *historypb.Request
	params url.Values
	sel    labels.Selector
	limit  int
	since  string
	until  string
}

func (s *session) changesQuery(ctx context.Context, args []string, all bool, since, until, selector string, limit int) (*changesQuery, error) {
	q := &changesQuery{params: url.Values{}, limit: limit, since: since, until: until}
	var err error
	if q.sel, err = parseSelector(selector); err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, fmt.Errorf("--limit %d: want N >= 0 (0: every change)", limit)
	}
	if all && s.kubectlOptions.namespace() != "" {
		return nil, errors.New("-A and -n exclude each other")
	}
	prefix := strings.TrimSuffix(s.etcdPrefix, "/") + "/"
	q.req = &historypb.Request{Key: []byte(prefix), RangeEnd: []byte(strings.TrimSuffix(prefix, "/") + "0")}
	if q.req.UnixMs, err = s.pastTime("since", since); err != nil {
		return nil, err
	}
	if until != "" {
		if q.req.EndUnixMs, err = s.pastTime("until", until); err != nil {
			return nil, err
		}
		if q.req.EndUnixMs <= q.req.UnixMs {
			return nil, fmt.Errorf("--until %s is not after --since %s: the window is empty", until, since)
		}
	}
	if !all {
		ns, err := s.namespace(ctx)
		if err != nil {
			return nil, err
		}
		q.params.Set("namespace", ns)
	}
	rs, err := s.types(ctx, args)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		q.params.Add("resource", r.Resource.String())
	}
	if len(rs) == 0 {
		for _, r := range unlessNamed {
			q.params.Add("exclude", r)
		}
	}
	return q, nil
}

// unlessNamed are left out of changes unless a TYPE names them: Events,
// which expire by themselves, and Leases, the heartbeats that controllers,
// kube-apiserver and every node renew every few seconds (QuantyKube keeps
// them ten minutes for that reason). Either would outnumber, by far, every
// change a person made.
var unlessNamed = []string{"events", "events.events.k8s.io", "leases.coordination.k8s.io"}

// changeRow is one change, as changes prints it.
type changeRow struct {
	Revision     int64    `json:"revision"`
	Time         string   `json:"time"`
	UnixMs       int64    `json:"unixMs"`
	Action       string   `json:"action"`
	RestoredFrom int64    `json:"restoredFrom,omitempty"`
	Type         string   `json:"type"`
	Namespace    string   `json:"namespace,omitempty"`
	Name         string   `json:"name"`
	Key          string   `json:"key"`
	Manager      string   `json:"manager,omitempty"`
	Changes      []string `json:"changes,omitempty"`
	Note         string   `json:"note,omitempty"`
}

// readChanges reads the query's window, page by page, as far as its
// limit: the rows in the order asked, and the store's revision when the
// first page was read (what --watch follows on from). A prefix kept for
// less than the window is gone around (changessplit.go).
func (s *session) readChanges(ctx context.Context, q *changesQuery) ([]changeRow, int64, error) {
	rows, header, err := s.readChangesAround(ctx, q)
	if err != nil {
		return nil, 0, q.windowError(err)
	}
	return rows, header, nil
}

// readChangesWhole is readChanges in one request a page.
func (s *session) readChangesWhole(ctx context.Context, q *changesQuery) ([]changeRow, int64, error) {
	req := proto.CloneOf(q.req)
	var rows []changeRow
	var header int64
	for range maxLogPages {
		var resp historypb.LogResponse
		if err := s.api.readWith(ctx, "changes", req, q.params, &resp); err != nil {
			return nil, 0, err
		}
		if header == 0 {
			header = resp.GetHeaderRevision()
		}
		page, err := s.changeRows(ctx, resp.GetEntries(), q.sel)
		if err != nil {
			return nil, 0, err
		}
		rows = append(rows, page...)
		if q.limit > 0 && len(rows) >= q.limit {
			return rows[:q.limit], header, nil
		}
		if resp.GetContinue() == "" {
			return rows, header, nil
		}
		req.Continue = resp.GetContinue()
	}
	return nil, 0, fmt.Errorf("the changes did not end after %d pages: narrow the window (--since, --until) or the types", maxLogPages)
}

// oldestRetained reads the floor from QuantyKube's answer to a request
// older than it (pkg/mvcc's OutOfRangeError).
var oldestRetained = regexp.MustCompile(`oldest retained revision (\d+) \(([^)]*)\)`)

// windowError says which end of the window is outside what QuantyKube
// retains.
func (q *changesQuery) windowError(err error) error {
	if !errors.Is(err, errOutsideRetention) {
		return err
	}
	m := oldestRetained.FindStringSubmatch(err.Error())
	var floor time.Time
	if m != nil {
		floor, _ = time.Parse(time.RFC3339, m[2])
	}
	if strings.Contains(err.Error(), "end time") || q.req.EndUnixMs != 0 && !floor.IsZero() && q.req.EndUnixMs <= floor.UnixMilli() {
		return fmt.Errorf("--since %s --until %s: the whole window is %w", q.since, q.until, err)
	}
	return fmt.Errorf("--since %s: the window's start is %w; a later --since (or one within --retain) lists what is kept", q.since, err)
}

// changeRows describes a page of entries, leaving out those whose object
// the selector does not match.
func (s *session) changeRows(ctx context.Context, entries []*historypb.LogEntry, sel labels.Selector) ([]changeRow, error) {
	var rows []changeRow
	var suspects []int
	for _, e := range entries {
		key := e.GetKv().GetKey()
		o, ok := s.table().Parse(key)
		if !ok {
			continue
		}
		cur, prev := decodeValue(e.GetKv().GetValue()).Object, decodeValue(e.GetPrevKv().GetValue()).Object
		labelled := cur
		if e.GetDeleted() != 0 {
			labelled = prev
		}
		if !selects(sel, labelled) {
			continue
		}
		r := changeRow{Revision: e.GetRevision(), UnixMs: e.GetUnixMs(), Namespace: o.Namespace, Name: o.Name, Key: string(key), Type: s.typeOf(ctx, o.Resource)}
		switch {
		case e.GetDeleted() != 0:
			r.Action = "deleted"
		case e.GetPrevKv() == nil && e.GetKv().GetVersion() == 1:
			r.Action = "created"
		default:
			r.Action = "updated"
		}
		stamp := ""
		if r.Action != "deleted" {
			r.Manager, stamp = changeManagerStamp(prev, cur, e.GetUnixMs())
		}
		if r.Action == "updated" {
			r.Changes, r.Note = changesOf(e.GetPrevKv(), e.GetKv())
		}
		if mayBeRestore(r, cur, stamp) || impossibleUpdate(r, prev, cur) {
			suspects = append(suspects, len(rows))
		}
		rows = append(rows, r)
	}
	return rows, s.tellRestores(ctx, rows, suspects)
}

// restoreSkew is how much older than its commit a write's managedFields
// stamp, or a create's creationTimestamp, may be and the write still be
// kube-apiserver's own: it stamps them at the request, a moment before
// the commit, to the second.
const restoreSkew = 5 * time.Second

// mayBeRestore says whether a change may be a restore, which writes an
// old value back as it was, old managedFields and creationTimestamp
// included: a write that managedFields do not explain (no entry's time
// moved), or whose manager's stamp, or a create's creationTimestamp, is
// older than the write. Only those are looked up in the key's own log
// (tellRestores), as log tells a restore.
func mayBeRestore(r changeRow, cur map[string]any, stamp string) bool {
	if r.Action == "deleted" {
		return false
	}
	commit := time.UnixMilli(r.UnixMs)
	old := func(ts string) bool {
		t, err := time.Parse(time.RFC3339, ts)
		return err == nil && commit.Sub(t) > restoreSkew
	}
	meta, _ := cur["metadata"].(map[string]any)
	created, _ := meta["creationTimestamp"].(string)
	return r.Manager == "" || old(stamp) || r.Action == "created" && old(created)
}

// impossibleUpdate says whether an update changed what kube-apiserver
// never changes on an update, as only a restore writes it: the object's
// uid or creationTimestamp (a restore over an object made again since),
// or a managedFields entry's time moved back. It tells a restore however
// soon after the state it restores it comes, where mayBeRestore's clock
// cannot.
func impossibleUpdate(r changeRow, prev, cur map[string]any) bool {
	if r.Action != "updated" || prev == nil || cur == nil {
		return false
	}
	pm, _ := prev["metadata"].(map[string]any)
	cm, _ := cur["metadata"].(map[string]any)
	for _, f := range []string{"uid", "creationTimestamp"} {
		if fmt.Sprint(pm[f]) != fmt.Sprint(cm[f]) {
			return true
		}
	}
	before := map[string]string{}
	for _, e := range managedEntries(prev) {
		before[e.id] = e.time
	}
	for _, e := range managedEntries(cur) {
		if t, ok := before[e.id]; ok && e.time < t {
			return true
		}
	}
	return false
}

// tellRestores reads the log of each suspect's key up to its change and
// classifies it as log does (logRows): a restore names the revision it
// wrote back, and no manager (the restore wrote the old managedFields).
func (s *session) tellRestores(ctx context.Context, rows []changeRow, suspects []int) error {
	for _, i := range suspects {
		r := &rows[i]
		entries, err := s.api.log(ctx, &historypb.Request{Key: []byte(r.Key), EndRevision: r.Revision})
		if errors.Is(err, errForbidden) {
			continue // listed by the view, not readable alone: left as it is
		}
		if err != nil {
			return err
		}
		for _, lr := range logRows(entries) {
			if lr.Revision == r.Revision && lr.Action == "restored" {
				r.Action, r.RestoredFrom, r.Manager = "restored", lr.RestoredFrom, ""
				r.Changes, r.Note = lr.Changes, lr.Note
			}
		}
	}
	return nil
}

// typeOf is how kubectl names a stored resource (deployment.apps), from
// discovery; the resource's own name when discovery does not serve it.
func (s *session) typeOf(ctx context.Context, r storagekey.Resource) string {
	all, err := s.disc.all(ctx)
	if err == nil {
		if i := slices.IndexFunc(all, func(a apiResource) bool { return a.Group == r.Group && a.Resource.Resource == r.Resource }); i >= 0 {
			return all[i].typeName()
		}
	}
	return r.String()
}

// watchChanges polls for the changes after revision from, oldest first,
// every watchInterval, and prints them, until ctx ends (an interrupt):
// then it returns nil, as kubectl get --watch ends.
func (s *session) watchChanges(ctx context.Context, q *changesQuery, from int64, p *changesPrinter) error {
	q.limit = 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(watchInterval):
		}
		// From the revision already seen, not the one after it, which
		// QuantyKube refuses as a future revision until it is written.
		req := &historypb.Request{Key: q.req.Key, RangeEnd: q.req.RangeEnd, Revision: from}
		rows, header, err := s.readChanges(ctx, &changesQuery{req: req, params: q.params, sel: q.sel, since: q.since})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		rows = slices.DeleteFunc(rows, func(r changeRow) bool { return r.Revision <= from })
		if err := p.print(rows, false); err != nil {
			return err
		}
		// On from what was read: the newest change printed, or the
		// store's revision when the first page was read, whichever is
		// later (a change filtered out need not be read again).
		from = max(from, header)
		for _, r := range rows {
			from = max(from, r.Revision)
		}
	}
}

// changesPrinter prints rows as a table, or as JSON or YAML documents.
type changesPrinter struct {
	s      *session
	format string
	all    bool // -A: the NAMESPACE column
	header bool // printed
}

// print prints rows; list says they are the whole listing (one document
// for -o json and yaml), not a batch that --watch found.
func (p *changesPrinter) print(rows []changeRow, list bool) error {
	s := p.s
	for i := range rows {
		rows[i].Time = s.when(rows[i].UnixMs)
	}
	switch {
	case (p.format == "json" || p.format == "yaml") && list:
		if rows == nil {
			rows = []changeRow{}
		}
		b, err := render(map[string]any{"changes": rows}, p.format)
		if err != nil {
			return err
		}
		_, err = s.out.Write(b)
		return err
	case p.format == "json" || p.format == "yaml":
		for _, r := range rows {
			b, err := render(r, p.format)
			if err != nil {
				return err
			}
			if p.format == "yaml" {
				b = append([]byte("---\n"), b...)
			}
			if _, err := s.out.Write(b); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		if list {
			fmt.Fprintln(s.errOut, "No changes found.")
		}
		return nil
	}
	tw := newTabular(s.out, 3)
	if !p.header {
		cols := []string{"TIME", "REVISION", "ACTION", "OBJECT"}
		if p.all {
			cols = append(cols, "NAMESPACE")
		}
		fmt.Fprintln(tw, strings.Join(append(cols, "MANAGER", "CHANGES"), "\t"))
		p.header = true
	}
	for _, r := range rows {
		action := r.Action
		if r.RestoredFrom != 0 {
			action = fmt.Sprintf("restored (revision %d)", r.RestoredFrom)
		}
		changes := summarize(r.Changes)
		if p.format == "wide" {
			changes = strings.Join(r.Changes, ", ")
		}
		if r.Note != "" {
			changes = "(" + r.Note + ")"
		}
		cells := []string{r.Time, fmt.Sprint(r.Revision), action, r.Type + "/" + r.Name}
		if p.all {
			cells = append(cells, dash(r.Namespace))
		}
		fmt.Fprintln(tw, strings.Join(append(cells, dash(r.Manager), changes), "\t"))
	}
	return tw.Flush()
}
