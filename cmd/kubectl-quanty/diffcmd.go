package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/proto/historypb"
)

var diffCmd = &command{
	name:  "diff",
	usage: "TYPE/NAME [-n NS] [--rev A | --at T1] [--rev B | --at T2] [--show-secrets]",
	short: "Show what changed between two revisions, as a unified YAML diff",
	long: `Shows a unified diff of the object's YAML between two points in its history.
With no point, the state before its last change against now; with one
(--rev or --at), that point against now; with two, the older against the
newer. metadata.managedFields and resourceVersion are left out. A
Secret's values are masked as kubectl diff masks them ("***", and
"*** (before)" and "*** (after)" where a value changed) unless
--show-secrets.

KUBECTL_EXTERNAL_DIFF is run instead of the built-in diff, as kubectl diff
runs it: with two folders holding the object's file under the same name.
The exit status is that of kubectl diff: 0 no differences, 1 differences,
2 an error.
`,
	examples: `
  # What the last change to a ConfigMap did
  kubectl quanty diff configmap/web

  # Revision 1234 against now
  kubectl quanty diff deploy/web -n shop --rev 1234

  # Between two revisions
  kubectl quanty diff cm/web --rev 1234 --rev 1300

  # Since an hour ago, with an external diff program
  KUBECTL_EXTERNAL_DIFF="diff -u" kubectl quanty diff cm/web --at -1h
`,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		key := keyFlag(fs)
		revs := fs.Int64Slice("rev", nil, "a revision to compare (once or twice)")
		ats := fs.StringArray("at", nil, "a time to compare (once or twice): RFC 3339, a local date-time or relative (-15m)")
		showSecrets := showSecretsFlag(fs, "in the diff")
		return func(ctx context.Context, s *session, args []string) error {
			return s.diff(ctx, args, *key, *revs, *ats, *showSecrets)
		}
	},
	errStatus: 2,
}

// snapshot is an object at one point in its history.
type snapshot struct {
	rev   int64            // the revision read
	kv    *mvccpb.KeyValue // nil: it did not exist then
	label string
}

// content is what a diff shows of the snapshot: the object as kubectl
// get shows it, without resourceVersion and managedFields (a copy, to
// mask), or for a value that is not an object, a comment line saying
// what it is (for an encrypted one, with a hash of its ciphertext, so
// that a change still shows). Both are empty when it did not exist.
func (v snapshot) content() (map[string]any, string) {
	if v.kv == nil {
		return nil, ""
	}
	val := decodeValue(v.kv.Value)
	if val.Object == nil {
		note := val.describe()
		if val.Encrypted != "" {
			note += fmt.Sprintf(", sha256:%x", sha256.Sum256(v.kv.Value))
		}
		return nil, "# " + note + "\n"
	}
	return val.shown(0, false), ""
}

// diffTexts are the YAML texts of two snapshots as a diff shows them,
// a Secret's values masked (secrets.go) unless showSecrets.
func diffTexts(from, to snapshot, showSecrets bool) (string, string, error) {
	a, noteA := from.content()
	b, noteB := to.content()
	if !showSecrets {
		maskSecrets(a, b)
	}
	text := func(obj map[string]any, note string) (string, error) {
		if obj == nil {
			return note, nil
		}
		y, err := render(obj, "yaml")
		return string(y), err
	}
	ta, err := text(a, noteA)
	if err != nil {
		return "", "", err
	}
	tb, err := text(b, noteB)
	return ta, tb, err
}

func (s *session) diff(ctx context.Context, args []string, key string, revs []int64, ats []string, showSecrets bool) error {
	if len(revs)+len(ats) > 2 {
		return errors.New("at most two points: --rev and --at, twice at most in all")
	}
	t, err := s.target(ctx, args, key)
	if err != nil {
		return err
	}
	var points []snapshot
	for _, r := range revs {
		if r <= 0 {
			return fmt.Errorf("--rev %d: want a revision > 0", r)
		}
		v, err := s.snapshot(ctx, &historypb.Request{Key: []byte(t.key), Revision: r}, "revision %d")
		if err != nil {
			return err
		}
		points = append(points, v)
	}
	for _, a := range ats {
		ms, err := parseAt(a, s.now())
		if err != nil {
			return err
		}
		v, err := s.snapshot(ctx, &historypb.Request{Key: []byte(t.key), UnixMs: ms}, "revision %d (at "+a+")")
		if err != nil {
			return err
		}
		points = append(points, v)
	}
	if len(points) < 2 {
		now, err := s.snapshot(ctx, &historypb.Request{Key: []byte(t.key)}, "revision %d (now)")
		if err != nil {
			return err
		}
		points = append(points, now)
	}
	if len(points) < 2 {
		before, err := s.beforeLastChange(ctx, t)
		if err != nil {
			return err
		}
		points = append([]snapshot{before}, points...)
	}
	from, to := points[0], points[1]
	if from.rev > to.rev {
		from, to = to, from
	}
	return s.showDiff(t, from, to, showSecrets)
}

// snapshot reads one point; label has a %d for the revision of what it
// shows (stateRevision).
func (s *session) snapshot(ctx context.Context, req *historypb.Request, label string) (snapshot, error) {
	rev, kv, err := s.state(ctx, req)
	if err != nil {
		return snapshot{}, err
	}
	v := snapshot{rev: rev, kv: kv, label: fmt.Sprintf(label, stateRevision(rev, kv))}
	if kv == nil {
		v.label += ", absent"
	}
	return v, nil
}

// stateRevision names the state read at revision rev: the object's own
// revision (its resourceVersion, the one log lists and get prints), not
// the store's, which every write anywhere moves on; rev when it did not
// exist.
func stateRevision(rev int64, kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return rev
	}
	return kv.ModRevision
}

// beforeLastChange is the state before the object's newest change.
func (s *session) beforeLastChange(ctx context.Context, t target) (snapshot, error) {
	entries, err := s.api.log(ctx, &historypb.Request{Key: []byte(t.key)})
	if err != nil {
		return snapshot{}, err
	}
	if len(entries) == 0 {
		return snapshot{}, fmt.Errorf("no history found for %s", t)
	}
	last := entries[len(entries)-1]
	rev := last.GetRevision() - 1
	switch prev := last.GetPrevKv(); {
	case prev != nil:
		return snapshot{rev: rev, kv: prev, label: fmt.Sprintf("revision %d", prev.ModRevision)}, nil
	case last.GetKv().GetVersion() == 1:
		return snapshot{rev: rev, label: fmt.Sprintf("revision %d, absent", rev)}, nil
	}
	return snapshot{}, fmt.Errorf("the state of %s before revision %d is no longer retained", t, last.GetRevision())
}

// diffFile names the object's file for an external diff as kubectl diff
// does: group.version.kind.namespace.name.
func (t target) diffFile() string {
	if t.res.Kind == "" {
		return strings.ReplaceAll(strings.Trim(t.key, "/"), "/", ".")
	}
	parts := []string{t.res.Group, t.res.Version, t.res.Kind, t.obj.Namespace, t.obj.Name}
	if t.res.Group == "" {
		parts = parts[1:]
	}
	if t.obj.Namespace == "" {
		parts = append(parts[:len(parts)-2], t.obj.Name)
	}
	return strings.Join(parts, ".")
}

func (s *session) showDiff(t target, from, to snapshot, showSecrets bool) error {
	a, b, err := diffTexts(from, to, showSecrets)
	if err != nil {
		return err
	}
	if s.externalDiff != "" {
		// The program's output is its own, and may be painted: it goes out
		// raw, and what it reads, the files, is escaped instead.
		differs, err := externalDiff(s.externalDiff, t.diffFile(),
			side{label: fmt.Sprintf("FROM-REV-%d", from.rev), text: string(escapeControls([]byte(a)))},
			side{label: fmt.Sprintf("TO-REV-%d", to.rev), text: string(escapeControls([]byte(b)))}, rawOf(s.out), rawOf(s.errOut))
		if err != nil {
			return err
		}
		if differs {
			return &exitError{code: 1}
		}
		return nil
	}
	d := unified(fmt.Sprintf("%s (%s)", t.nameOnly(), from.label), fmt.Sprintf("%s (%s)", t.nameOnly(), to.label), a, b)
	if d == "" {
		return nil
	}
	if err := writeDiff(s.out, d, s.outIsTerminal); err != nil {
		return err
	}
	return &exitError{code: 1}
}
