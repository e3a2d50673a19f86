package changes

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// read reads the query's window, page by page, as far as its
// limit: the rows in the order asked, and the store's revision when the
// first page was read (what --watch follows on from). A prefix kept for
// less than the window is gone around (split.go).
func (o *Options) read(ctx context.Context, q *query) ([]Row, int64, error) {
	rows, header, err := o.readAround(ctx, q)
	if err != nil {
		return nil, 0, q.windowError(err)
	}
	return rows, header, nil
}

// readWhole is read in one request a page.
func (o *Options) readWhole(ctx context.Context, q *query) ([]Row, int64, error) {
	req := proto.CloneOf(q.req)
	var rows []Row
	var header int64
	for range api.MaxPages {
		var resp historypb.LogResponse
		if err := o.cluster.History.Read(ctx, "changes", req, q.params, &resp); err != nil {
			return nil, 0, err
		}
		if header == 0 {
			header = resp.GetHeaderRevision()
		}
		page, err := o.rows(ctx, resp.GetEntries(), q.sel)
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
	return nil, 0, fmt.Errorf("the changes did not end after %d pages: narrow the window (--since, --until) or the types", api.MaxPages)
}

// oldestRetained reads the floor from QuantyKube's answer to a request
// older than it (pkg/mvcc's OutOfRangeError).
var oldestRetained = regexp.MustCompile(`oldest retained revision (\d+) \(([^)]*)\)`)

// windowError says which end of the window is outside what QuantyKube
// retains.
func (q *query) windowError(err error) error {
	if !errors.Is(err, api.ErrOutsideRetention) {
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

// rows describes a page of entries, leaving out those whose object
// the selector does not match.
func (o *Options) rows(ctx context.Context, entries []*historypb.LogEntry, sel labels.Selector) ([]Row, error) {
	var rows []Row
	var suspects []int
	for _, e := range entries {
		key := e.GetKv().GetKey()
		obj, ok := o.cluster.Keys.Parse(key)
		if !ok {
			continue
		}
		cur, prev := objects.Decode(e.GetKv().GetValue()).Object, objects.Decode(e.GetPrevKv().GetValue()).Object
		labelled := cur
		if e.GetDeleted() != 0 {
			labelled = prev
		}
		if !util.Selects(sel, labelled) {
			continue
		}
		r := Row{Revision: e.GetRevision(), UnixMs: e.GetUnixMs(), Namespace: obj.Namespace, Name: obj.Name, Key: string(key), Type: o.typeOf(ctx, obj.Resource)}
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
			r.Manager, stamp = objects.ChangeManagerStamp(prev, cur, e.GetUnixMs())
		}
		if r.Action == "updated" {
			r.Changes, r.Note = objects.ChangesOf(e.GetPrevKv(), e.GetKv())
		}
		if mayBeRestore(r, cur, stamp) || impossibleUpdate(r, prev, cur) {
			suspects = append(suspects, len(rows))
		}
		rows = append(rows, r)
	}
	return rows, o.tellRestores(ctx, rows, suspects)
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
func mayBeRestore(r Row, cur map[string]any, stamp string) bool {
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
func impossibleUpdate(r Row, prev, cur map[string]any) bool {
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
	for _, e := range objects.ManagedEntries(prev) {
		before[e.ID] = e.Time
	}
	for _, e := range objects.ManagedEntries(cur) {
		if t, ok := before[e.ID]; ok && e.Time < t {
			return true
		}
	}
	return false
}

// tellRestores reads the log of each suspect's key up to its change and
// classifies it as log does (objects.Changes): a restore names the revision it
// wrote back, and no manager (the restore wrote the old managedFields).
func (o *Options) tellRestores(ctx context.Context, rows []Row, suspects []int) error {
	for _, i := range suspects {
		r := &rows[i]
		entries, err := o.cluster.History.Log(ctx, &historypb.Request{Key: []byte(r.Key), EndRevision: r.Revision})
		if errors.Is(err, api.ErrForbidden) {
			continue // listed by the view, not readable alone: left as it is
		}
		if err != nil {
			return err
		}
		for _, lr := range objects.Changes(entries) {
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
func (o *Options) typeOf(ctx context.Context, r storagekey.Resource) string {
	all, err := o.cluster.Discovery.All(ctx)
	if err == nil {
		if i := slices.IndexFunc(all, func(a discovery.Resource) bool { return a.Group == r.Group && a.Resource.Resource == r.Resource }); i >= 0 {
			return all[i].TypeName()
		}
	}
	return r.String()
}
