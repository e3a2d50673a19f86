package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/proto/historypb"
)

var restoreCmd = &command{
	name:  "restore",
	usage: "TYPE/NAME (--rev N | --at TIME) [-n NS] [--dry-run] [--yes] [--with-owners] [--show-secrets] [-o text|json|yaml]",
	short: "Write an object back as it was at a revision or a time",
	long: `Writes the object back as it was at revision N or at TIME: its old value,
uid included, or a delete if it did not exist then, as an ordinary new
revision that kube-apiserver and its watchers see. It shows the diff from
now and asks before writing; --yes answers for scripts, --dry-run only
shows. A Secret's values are masked in the diff unless --show-secrets.

It warns, and offers the revision from before the deletion began, when
the revision is one of an object being deleted (deletionTimestamp set:
restored as it was, it would go on being deleted).

It warns when an owner in its ownerReferences no longer exists: the
garbage collector would delete it again. It restores no owner on its own:
--with-owners restores first each gone owner that is its controller
(ownerReferences' controller: true) in its namespace, and that owner's
own controller if gone too, after listing each with the revision it
restores; asked instead, the answer is no unless you say yes; with
--yes or --dry-run alone, no owner is restored. A cluster-scoped owner is
never restored, nor an owner that is not its controller: restore it
yourself if it should come back.
`,
	examples: `
  # Bring back a ConfigMap as it was at revision 1234, after looking at the diff
  kubectl quanty restore configmap/web --rev 1234

  # As it was ten minutes ago, without asking (scripts)
  kubectl quanty restore deploy/web -n shop --at -10m --yes

  # Only show what would be written
  kubectl quanty restore secret/db --rev 1234 --dry-run

  # A ReplicaSet whose Deployment was deleted too: the Deployment first
  kubectl quanty restore rs/web-5d8 -n shop --rev 1234 --with-owners
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		key := keyFlag(fs)
		var at point
		at.register(fs, "to restore")
		dryRun := fs.Bool("dry-run", false, "show what would be written, write nothing")
		yes := fs.Bool("yes", false, "do not ask: restore (and take the revision offered from before a deletion began; owners only with --with-owners)")
		withOwners := fs.Bool("with-owners", false, "restore first each gone owner that is its controller in its namespace, after listing them")
		showSecrets := showSecretsFlag(fs, "in the diff")
		out := outputFlag(fs, "text", "json", "yaml")
		return func(ctx context.Context, s *session, args []string) error {
			t, rev, old, err := s.stateAt(ctx, args, *key, &at, out)
			if err != nil {
				return err
			}
			o := restoreOpts{dryRun: *dryRun, yes: *yes, withOwners: *withOwners, showSecrets: *showSecrets}
			if rev, old, err = s.checkDeleting(ctx, t, rev, old, o); err != nil {
				return err
			}
			if err := s.restoreOwners(ctx, t, old, o); err != nil {
				return err
			}
			res, err := s.restoreTo(ctx, t, rev, old, o)
			if err != nil {
				return err
			}
			return s.report(res, out.format)
		}
	},
}

type restoreOpts struct{ dryRun, yes, withOwners, showSecrets bool }

// restoreResult is what restore did, as -o json prints it.
type restoreResult struct {
	Object      string `json:"object"`
	Key         string `json:"key"`
	Revision    int64  `json:"revision"`
	Action      string `json:"action"` // create, update, delete, none
	DryRun      bool   `json:"dryRun,omitempty"`
	NewRevision int64  `json:"newRevision,omitempty"`
}

func (s *session) report(r restoreResult, format string) error {
	if format == "text" {
		_, err := fmt.Fprintln(s.out, r.line())
		return err
	}
	b, err := render(r, format)
	if err != nil {
		return err
	}
	_, err = s.out.Write(b)
	return err
}

func (r restoreResult) line() string {
	switch {
	case r.Action == "none":
		return fmt.Sprintf("%s is already as it was at revision %d: nothing to restore", r.Object, r.Revision)
	case r.DryRun:
		return fmt.Sprintf("%s: would %s it as it was at revision %d (dry run)", r.Object, r.Action, r.Revision)
	case r.NewRevision == 0:
		return fmt.Sprintf("%s was already as it was at revision %d: nothing written", r.Object, r.Revision)
	}
	return fmt.Sprintf("%s restored to revision %d (new revision %d)", r.Object, r.Revision, r.NewRevision)
}

// restoreTo shows the diff from now to the state at rev (old), asks, and
// writes it back.
func (s *session) restoreTo(ctx context.Context, t target, rev int64, old *mvccpb.KeyValue, o restoreOpts) (restoreResult, error) {
	r := restoreResult{Object: t.String(), Key: t.key, Revision: rev, DryRun: o.dryRun}
	nowRev, cur, err := s.state(ctx, &historypb.Request{Key: []byte(t.key)})
	if err != nil {
		return r, err
	}
	switch {
	case cur == nil && old == nil || cur != nil && old != nil && string(cur.Value) == string(old.Value):
		r.Action = "none"
		return r, nil
	case cur == nil:
		r.Action = "create"
	case old == nil:
		r.Action = "delete"
	default:
		r.Action = "update"
	}
	from := snapshot{rev: nowRev, kv: cur, label: fmt.Sprintf("revision %d (now)", stateRevision(nowRev, cur))}
	to := snapshot{rev: rev, kv: old, label: fmt.Sprintf("revision %d", rev)}
	a, b, err := diffTexts(from, to, o.showSecrets)
	if err != nil {
		return r, err
	}
	fmt.Fprint(s.errOut, unified(t.nameOnly()+" ("+from.label+")", t.nameOnly()+" ("+to.label+")", a, b))
	if o.dryRun {
		return r, nil
	}
	ok, err := s.confirm(fmt.Sprintf("Restore %s to revision %d (%s)?", t, rev, r.Action), false, o.yes)
	if err != nil {
		return r, err
	}
	if !ok {
		return r, errDeclined
	}
	// Only over the state the diff showed: a change made while the
	// question was read is not overwritten.
	resp, err := s.api.restore(ctx, &historypb.Request{Key: []byte(t.key), Revision: rev, IfModRevision: proto.Int64(cur.GetModRevision())})
	if errors.Is(err, errConflict) {
		return r, fmt.Errorf("not restored: %s changed since the diff; run it again (%w)", t, err)
	}
	if err != nil {
		return r, fmt.Errorf("restoring %s: %w", t, err)
	}
	r.NewRevision = resp.GetNewRevision()
	return r, nil
}

// errDeclined is a restore answered no.
var errDeclined = errors.New("not restored")

// beingDeleted says why the object in kv was being deleted, or "".
func beingDeleted(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return ""
	}
	v := decodeValue(kv.Value)
	if v.Object == nil || v.u().GetDeletionTimestamp() == nil {
		return ""
	}
	why := "deletionTimestamp " + v.u().GetDeletionTimestamp().UTC().Format("2006-01-02T15:04:05Z")
	if f := v.u().GetFinalizers(); len(f) > 0 {
		why += ", finalizers " + strings.Join(f, ", ")
	}
	return why
}

// restorable is the newest state of a key, at or before revision upto,
// of an object that was not being deleted, from the key's log (oldest
// first): what to restore to bring back an object whose deletion began
// at some point.
func restorable(entries []*historypb.LogEntry, upto int64) (int64, *mvccpb.KeyValue, bool) {
	var rev int64
	var kv *mvccpb.KeyValue
	consider := func(r int64, k *mvccpb.KeyValue) {
		if r <= upto && k != nil && beingDeleted(k) == "" {
			rev, kv = r, k
		}
	}
	if len(entries) > 0 {
		if p := entries[0].GetPrevKv(); p != nil {
			consider(p.ModRevision, p)
		}
	}
	for _, e := range entries {
		if e.GetDeleted() == 0 {
			consider(e.GetRevision(), e.GetKv())
		}
	}
	return rev, kv, kv != nil
}

// checkDeleting warns when the state to restore is one of an object being
// deleted, and offers the newest state from before its deletion began.
func (s *session) checkDeleting(ctx context.Context, t target, rev int64, old *mvccpb.KeyValue, o restoreOpts) (int64, *mvccpb.KeyValue, error) {
	why := beingDeleted(old)
	if why == "" {
		return rev, old, nil
	}
	fmt.Fprintf(s.errOut, "Warning: at revision %d, %s was being deleted (%s): restored as it was, it would go on being deleted.\n", rev, t, why)
	entries, err := s.api.log(ctx, &historypb.Request{Key: []byte(t.key)})
	if err != nil {
		return 0, nil, err
	}
	before, kv, ok := restorable(entries, rev)
	if !ok {
		fmt.Fprintf(s.errOut, "The history holds no state of %s from before its deletion began.\n", t)
		return rev, old, nil
	}
	take, err := s.confirm(fmt.Sprintf("Restore revision %d instead, from before its deletion began?", before), true, o.yes || o.dryRun)
	if err != nil {
		return 0, nil, err
	}
	if take {
		fmt.Fprintf(s.errOut, "Restoring revision %d, from before the deletion began.\n", before)
		return before, kv, nil
	}
	return rev, old, nil
}
