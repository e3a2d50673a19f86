package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/quantyroot/quantykube/proto/historypb"
)

var revertCmd = &command{
	name:  "revert",
	usage: "-n NS (--since TIME | --to-rev N) [TYPE[,TYPE...]...] [-l SELECTOR] [--dry-run] [--diff] [--yes] [--show-secrets] [-o text|json|yaml]",
	short: "Put every object of a namespace changed since a time back as it was then",
	long: `Undoes every change made in a namespace after TIME (or after revision N):
each object changed since is restored as it was then, each one deleted
since is re-created with its old uid, and each one created since is
deleted. Without TYPE, every type in the namespace but Events; -l keeps
the objects whose labels matched the selector then (now, for one created
since).

Objects a controller makes again from what is reverted are skipped, and
named, as undelete skips them: those with a controller owner (a
Deployment's ReplicaSets, their Pods), a Service's Endpoints,
ServiceAccount tokens, the default ServiceAccount and kube-root-ca.crt.

It shows the whole plan first, as a table (and, with --diff, a diff per
object from now to then), and writes nothing without a yes: --yes answers
for scripts, --dry-run only shows. Each write goes through the restore
endpoint, so kube-apiserver checks it as it would check the same write
from you; one it refuses is named with its reason, and the rest still go.
An object that changed again after the plan was read is left alone, and
named. The exit status is 1 if any object was not reverted.
`,
	examples: `
  # What would undo the last half hour in the namespace shop
  kubectl quanty revert -n shop --since 30m --dry-run --diff

  # Undo it, after confirming
  kubectl quanty revert -n shop --since 2026-05-01T03:00:00Z

  # Only the Deployments and ConfigMaps labelled app=web, back to revision 1790
  kubectl quanty revert -n shop --to-rev 1790 deployments,configmaps -l app=web --yes
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		since := fs.String("since", "", "undo the changes at or after TIME (or a duration: 1h means an hour ago)")
		toRev := fs.Int64("to-rev", 0, "undo the changes after revision N")
		selector := fs.StringP("selector", "l", "", "only objects whose labels match (as kubectl -l), as they were then")
		dryRun := fs.Bool("dry-run", false, "show the plan, write nothing")
		showDiff := fs.Bool("diff", false, "show a diff per object, from now to then")
		yes := fs.Bool("yes", false, "do not ask")
		showSecrets := showSecretsFlag(fs, "in the diffs")
		out := outputFlag(fs, "text", "json", "yaml")
		return func(ctx context.Context, s *session, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			sel, err := parseSelector(*selector)
			if err != nil {
				return err
			}
			p, err := s.planRevert(ctx, args, *since, *toRev, sel)
			if err != nil {
				return err
			}
			return s.revert(ctx, p, revertOpts{dryRun: *dryRun, diff: *showDiff, yes: *yes, showSecrets: *showSecrets}, out.format)
		}
	},
}

type revertOpts struct{ dryRun, diff, yes, showSecrets bool }

// revertItem is one object to put back: its state then (nil: it did not
// exist) and now (nil: it does not).
type revertItem struct {
	candidate       // res, key, obj, kv: the state then, or now when created since
	rev       int64 // a revision whose state of the key is then's
	// then and now are its states; nil when absent.
	then, now *mvccpb.KeyValue
	nowRev    int64  // its mod_revision now, 0 when absent: the write's condition
	action    string // restore, re-create, delete
	changes   []string
}

// revertPlan is what revert writes, and what it leaves.
type revertPlan struct {
	ns      string
	point   int64 // the revision reverted to
	label   string
	items   []revertItem
	skipped []skipped
	unread  []string
}

// planRevert reads every change in the namespace after the point and
// decides, per object, what puts it back.
func (s *session) planRevert(ctx context.Context, args []string, since string, toRev int64, sel labels.Selector) (*revertPlan, error) {
	ns, err := s.namespace(ctx)
	if err != nil {
		return nil, err
	}
	from := &historypb.Request{}
	p := &revertPlan{ns: ns}
	switch {
	case since != "" && toRev != 0:
		return nil, errors.New("--since and --to-rev exclude each other")
	case toRev < 0:
		return nil, fmt.Errorf("--to-rev %d: want a revision > 0", toRev)
	case toRev > 0:
		from.Revision, p.point, p.label = toRev+1, toRev, fmt.Sprintf("revision %d", toRev)
	case since != "":
		ms, err := s.pastTime("since", since)
		if err != nil {
			return nil, err
		}
		from.UnixMs, p.label = ms, since
	default:
		return nil, errors.New("want --since TIME or --to-rev N: the point to go back to")
	}
	// The point itself, read first: a point outside the retention window
	// (or a revision not yet written) is the whole command's error, named
	// as the flag that gave it.
	nsRes, err := s.disc.resolve(ctx, "namespaces")
	if err != nil {
		return nil, err
	}
	nsTarget, err := targetIn(s.table(), nsRes, ns, "")
	if err != nil {
		return nil, err
	}
	at := &historypb.Request{Key: []byte(nsTarget.key), Revision: p.point, UnixMs: from.UnixMs}
	if p.point, _, err = s.state(ctx, at); err != nil {
		if errors.Is(err, errOutsideRetention) {
			return nil, fmt.Errorf("%s: the point to go back to is %w", revertFlag(since, toRev), err)
		}
		return nil, err
	}
	// The log from the revision after the point, not from the time: the
	// states written back are those at the point, exactly.
	from = &historypb.Request{Revision: p.point + 1}
	rs, err := s.types(ctx, args)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		all, err := s.disc.all(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range all {
			if r.Namespaced && !expiring(r) {
				rs = append(rs, r)
			}
		}
	}
	for _, r := range rs {
		if !r.Namespaced {
			return nil, fmt.Errorf("%s is not namespaced: revert undoes what changed in one namespace", r.Resource)
		}
	}
	var cands []revertItem
	for _, sc := range s.scan(ctx, s.scopesOf(rs, ns), from) {
		if sc.err != nil {
			// A resource kept for less than the rest (leases) cannot be
			// read back to the point, and one you may not list is not
			// yours to revert; the rest can be.
			if !errors.Is(sc.err, errForbidden) && !errors.Is(sc.err, errOutsideRetention) {
				return nil, sc.err
			}
			p.unread = append(p.unread, fmt.Sprintf("%s: %v", sc.res.Resource, sc.err))
			continue
		}
		keys, logs := byKey(sc.entries)
		for _, k := range keys {
			if it, ok := s.revertItemOf(sc.res, k, logs[k], p.point, sel); ok {
				cands = append(cands, it)
			}
		}
	}
	return p, s.splitRevert(ctx, p, cands)
}

// revertFlag names the flag that gave the point.
func revertFlag(since string, toRev int64) string {
	if since != "" {
		return "--since " + since
	}
	return fmt.Sprintf("--to-rev %d", toRev)
}

// revertItemOf is what puts key back, from its log after the point; false
// when nothing does (it is as it was, or was created and deleted since),
// or the selector leaves it out.
func (s *session) revertItemOf(res apiResource, key string, l []*historypb.LogEntry, point int64, sel labels.Selector) (revertItem, bool) {
	first, last := l[0], l[len(l)-1]
	o, _ := s.table().Parse([]byte(key))
	it := revertItem{candidate: candidate{res: res, key: key, obj: o}, rev: point}
	thenKV := first.GetPrevKv()
	if thenKV == nil && first.GetKv().GetVersion() != 1 {
		// Its state then is no longer retained (the window moved past it
		// while the log was read): nothing safe to write back.
		return it, false
	}
	var nowKV = last.GetKv()
	if last.GetDeleted() != 0 {
		nowKV = nil
	} else {
		it.nowRev = last.GetRevision()
	}
	switch {
	case thenKV == nil && nowKV == nil:
		return it, false
	case thenKV != nil && nowKV != nil && string(thenKV.Value) == string(nowKV.Value):
		return it, false
	case thenKV == nil:
		it.action, it.kv = "delete", nowKV
	case nowKV == nil:
		it.action, it.kv = "re-create", thenKV
	default:
		it.action, it.kv = "restore", thenKV
	}
	it.then, it.now = thenKV, nowKV
	if !selects(sel, it.value().Object) {
		return it, false
	}
	if it.then != nil && it.now != nil {
		it.changes, _ = changesOf(nowKV, thenKV)
	}
	return it, true
}

// splitRevert orders the plan's items, and sets aside those a controller
// makes again (undelete's skipReason): writes of what others refer to
// first (rank), deletes last, workloads before what they refer to.
func (s *session) splitRevert(ctx context.Context, p *revertPlan, cands []revertItem) error {
	services := map[string]bool{}
	for _, it := range cands {
		if it.res.String() != "endpoints" {
			continue
		}
		// An Endpoints is the endpoints controller's where its Service
		// exists now or is being put back.
		services[it.obj.Name] = s.serviceExists(ctx, p.ns, it.obj.Name, cands)
	}
	for _, it := range cands {
		if why := skipReason(it.candidate, services); why != "" {
			p.skipped = append(p.skipped, skipped{it.candidate, why})
			continue
		}
		p.items = append(p.items, it)
	}
	slices.SortStableFunc(p.skipped, func(a, b skipped) int {
		return cmp.Or(cmp.Compare(a.res.String(), b.res.String()), cmp.Compare(a.obj.Name, b.obj.Name))
	})
	step := func(it revertItem) int {
		if it.action == "delete" {
			return 100 - rank(it.res.Resource)
		}
		return rank(it.res.Resource)
	}
	slices.SortStableFunc(p.items, func(a, b revertItem) int {
		return cmp.Or(cmp.Compare(step(a), step(b)), cmp.Compare(a.res.String(), b.res.String()), cmp.Compare(a.obj.Name, b.obj.Name))
	})
	return nil
}

// serviceExists reports whether Service name is in the namespace now, or
// comes back with the revert.
func (s *session) serviceExists(ctx context.Context, ns, name string, cands []revertItem) bool {
	for _, it := range cands {
		if it.res.String() == "services" && it.obj.Name == name {
			return it.then != nil
		}
	}
	res, err := s.disc.resolve(ctx, "services")
	if err != nil {
		return false
	}
	t, err := targetIn(s.table(), res, name, ns)
	if err != nil {
		return false
	}
	_, kv, err := s.state(ctx, &historypb.Request{Key: []byte(t.key)})
	return err == nil && kv != nil
}

// revertResult is what was done to one object, as -o json prints it.
type revertResult struct {
	Object      string   `json:"object"`
	Key         string   `json:"key"`
	Action      string   `json:"action"`
	Revision    int64    `json:"revision"`
	Changes     []string `json:"changes,omitempty"`
	NewRevision int64    `json:"newRevision,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// revertReport is revert's -o json and -o yaml.
type revertReport struct {
	Namespace string         `json:"namespace"`
	Revision  int64          `json:"revision"`
	DryRun    bool           `json:"dryRun,omitempty"`
	Objects   []revertResult `json:"objects"`
	Skipped   []skipReport   `json:"skipped"`
	Unread    []string       `json:"unread,omitempty"`
}

func (s *session) revert(ctx context.Context, p *revertPlan, o revertOpts, format string) error {
	rep := revertReport{Namespace: p.ns, Revision: p.point, DryRun: o.dryRun, Objects: []revertResult{}, Skipped: []skipReport{}}
	if err := s.showRevertPlan(p, o); err != nil {
		return err
	}
	for _, sk := range p.skipped {
		rep.Skipped = append(rep.Skipped, skipReport{Object: sk.candidate.String(), Reason: sk.reason})
	}
	rep.Unread = p.unread
	if len(p.items) > 0 && !o.dryRun {
		ok, err := s.confirm(fmt.Sprintf("Revert %d objects in namespace %s to revision %d?", len(p.items), p.ns, p.point), false, o.yes)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not reverted")
		}
	}
	failed := 0
	for _, it := range p.items {
		r := revertResult{Object: it.String(), Key: it.key, Action: it.action, Revision: it.rev, Changes: it.changes}
		if !o.dryRun {
			// Only over the state the plan showed (its mod_revision now, 0
			// for absent): an object changed since is left alone.
			resp, err := s.api.restore(ctx, &historypb.Request{Key: []byte(it.key), Revision: it.rev, IfModRevision: proto.Int64(it.nowRev)})
			switch {
			case errors.Is(err, errConflict):
				err = fmt.Errorf("changed since the plan was read, so left alone (%w)", err)
			case err == nil && resp.GetNewRevision() == 0:
				err = errors.New("nothing written: it was already as it was then")
			}
			if err != nil {
				failed++
				r.Error = err.Error()
				fmt.Fprintf(s.errOut, "error: %s %s: %v\n", it.action, it, err)
			} else {
				r.NewRevision = resp.GetNewRevision()
			}
		}
		rep.Objects = append(rep.Objects, r)
		if format == "text" && r.Error == "" {
			fmt.Fprintln(s.out, r.line(o.dryRun))
		}
	}
	if format != "text" {
		b, err := render(rep, format)
		if err != nil {
			return err
		}
		if _, err := s.out.Write(b); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d objects were not reverted", failed, len(p.items))
	}
	return nil
}

func (r revertResult) line(dryRun bool) string {
	done := map[string]string{"restore": "restored", "re-create": "re-created", "delete": "deleted"}[r.Action]
	if dryRun {
		return fmt.Sprintf("%s: would be %s as at revision %d (dry run)", r.Object, done, r.Revision)
	}
	return fmt.Sprintf("%s %s as at revision %d (new revision %d)", r.Object, done, r.Revision, r.NewRevision)
}

// showRevertPlan prints the plan on standard error, where the question
// is: the table, what is skipped and not read, and the diffs.
func (s *session) showRevertPlan(p *revertPlan, o revertOpts) error {
	if len(p.items) == 0 {
		fmt.Fprintf(s.errOut, "Nothing to revert in namespace %s: no object changed after %s (revision %d).\n", p.ns, p.label, p.point)
	} else {
		fmt.Fprintf(s.errOut, "Reverting %d objects in namespace %s to revision %d (%s):\n", len(p.items), p.ns, p.point, p.label)
		tw := newTabular(s.errOut, 3)
		fmt.Fprintln(tw, "ACTION\tOBJECT\tNOW\tTHEN\tCHANGES")
		for _, it := range p.items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.action, it, revOrAbsent(it.nowRev), revOrAbsent(it.then.GetModRevision()), summarize(it.changes))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	tw := newTabular(s.errOut, 2)
	if len(p.skipped) > 0 {
		fmt.Fprintln(tw, "Skipped (a controller makes them again):")
	}
	for _, sk := range p.skipped {
		fmt.Fprintf(tw, "  -\t%s\t%s\n", sk.candidate, sk.reason)
	}
	for _, u := range p.unread {
		fmt.Fprintf(tw, "Not read (so not reverted): %s\n", u)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !o.diff {
		return nil
	}
	for _, it := range p.items {
		from := snapshot{kv: it.now, label: "now"}
		to := snapshot{kv: it.then, label: fmt.Sprintf("revision %d", it.rev)}
		a, b, err := diffTexts(from, to, o.showSecrets)
		if err != nil {
			return err
		}
		if err := writeDiff(s.errOut, unified(it.String()+" ("+from.label+")", it.String()+" ("+to.label+")", a, b), s.outIsTerminal); err != nil {
			return err
		}
	}
	return nil
}

// revOrAbsent is a state's revision, or that there was none.
func revOrAbsent(r int64) string {
	if r == 0 {
		return "(absent)"
	}
	return fmt.Sprint(r)
}
