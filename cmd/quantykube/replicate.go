package main

// `serve --replicate URL`, `restore --from URL` and `replica ls URL`:
// the store streamed to object storage and rebuilt from it
// (pkg/replicate, docs/backup.md, ADR-044).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/replicate"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// objstoreFlags name an object store: its URL's CA and encryption key.
type objstoreFlags struct{ opts objstore.Options }

func (o *objstoreFlags) register(fs *pflag.FlagSet, prefix string) {
	fs.StringVar(&o.opts.CAFile, prefix+"ca-file", "", "the CA that verifies the object store's TLS certificate (default: the system's)")
	fs.StringVar(&o.opts.EncryptionKeyFile, prefix+"encryption-key-file", "", "encrypt objects on the client with this key file (the bucket holds every Secret of the cluster, in every version; docs/backup.md) (default: none, objects are not encrypted)")
}

// replicateFlags are serve's --replicate flags.
type replicateFlags struct {
	url string
	objstoreFlags
	cfg       replicate.Config
	hold      time.Duration
	holdBytes int64
}

func (r *replicateFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&r.url, "replicate", "", "SQLite: stream the store to object storage, s3://BUCKET/PREFIX?endpoint=URL&region=R&force-path-style=true or file:///PATH (docs/backup.md); off when empty")
	r.objstoreFlags.register(fs, "replicate-")
	fs.DurationVar(&r.cfg.Interval, "replicate-interval", replicate.DefaultInterval, "replication: ship committed revisions this often, at most one object PUT each time (the RPO)")
	fs.DurationVar(&r.cfg.BaseInterval, "replicate-base-interval", replicate.DefaultBaseInterval, "replication: take a fresh base (a whole copy of the store) this often")
	fs.IntVar(&r.cfg.RetainBases, "replicate-retain-bases", replicate.DefaultRetainBases, "replication: keep this many bases, with the segments after the oldest")
	fs.DurationVar(&r.cfg.RetainAge, "replicate-retain-age", replicate.DefaultRetainAge, "replication: also prune bases older than this (the newest always stays; 0: by count only)")
	fs.DurationVar(&r.hold, "replicate-hold", replicate.DefaultHold, "replication: while the object store cannot be reached, keep the history not yet shipped past the --retain rules for up to this long; past it they prune it, and a fresh base follows (0: retention alone decides)")
	fs.Int64Var(&r.holdBytes, "replicate-hold-bytes", replicate.DefaultHoldBytes, "replication: end --replicate-hold early once the store's database and WAL files have grown by this many bytes since the oldest revision not shipped (0: no bound in bytes)")
}

func (r *replicateFlags) check() error {
	if r.url == "" {
		return nil
	}
	switch {
	case r.cfg.Interval < 10*time.Millisecond:
		return fmt.Errorf("--replicate-interval %s: want at least 10ms", r.cfg.Interval)
	case r.cfg.BaseInterval < time.Minute:
		return fmt.Errorf("--replicate-base-interval %s: want at least 1m", r.cfg.BaseInterval)
	case r.cfg.RetainBases < 1:
		return fmt.Errorf("--replicate-retain-bases %d: want at least 1", r.cfg.RetainBases)
	case r.cfg.RetainAge < 0:
		return fmt.Errorf("--replicate-retain-age %s: want 0 or more", r.cfg.RetainAge)
	case r.hold < 0:
		return fmt.Errorf("--replicate-hold %s: want 0 or more", r.hold)
	case r.holdBytes < 0:
		return fmt.Errorf("--replicate-hold-bytes %d: want 0 or more", r.holdBytes)
	}
	r.cfg.HoldBytes = r.holdBytes
	if r.holdBytes == 0 {
		r.cfg.HoldBytes = -1 // the flag's 0 is the Config's "no bound"
	}
	r.cfg.Hold = r.hold
	if r.hold == 0 {
		r.cfg.Hold = -1 // the flag's 0 is the Config's "not at all"
	}
	return nil
}

// retentionHold is the replicator's hold on the store's retention
// (Replicator.Hold), bound before the server starts and the replicator
// after: none before it starts.
func (r *replicateFlags) retentionHold(rep *atomic.Pointer[replicate.Replicator]) func() int64 {
	return func() int64 {
		if p := rep.Load(); p != nil {
			return p.Hold()
		}
		return 0
	}
}

// healthWarning is the replicator's /readyz?verbose warning, bound before
// the server starts and the replicator after.
func (r *replicateFlags) healthWarning(rep *atomic.Pointer[replicate.Replicator]) endpoint.HealthWarning {
	return endpoint.HealthWarning{Name: "replicate", Check: func(ctx context.Context) error {
		if p := rep.Load(); p != nil {
			return p.Check(ctx)
		}
		return nil
	}}
}

// start starts replicating the store cfg names; the server has created it.
func (r *replicateFlags) start(ctx context.Context, cfg endpoint.Config, log *slog.Logger) (*replicate.Replicator, error) {
	d, err := sqliteDialect("serve --replicate", cfg)
	if err != nil {
		return nil, err
	}
	st, err := objstore.Open(ctx, r.url, r.opts)
	if err != nil {
		return nil, fmt.Errorf("--replicate: %w", err)
	}
	c := r.cfg
	c.Dialect, c.Store, c.Logger = d, st, log
	return replicate.Start(ctx, c)
}

func sqliteDialect(cmd string, cfg endpoint.Config) (*sqlite.Dialect, error) {
	md, err := endpoint.NewDialect(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	d, ok := md.(*sqlite.Dialect)
	if !ok {
		return nil, fmt.Errorf("%s: %s is not a SQLite store: replication to object storage serves SQLite (ADR-052); for PostgreSQL and MySQL use the database's point-in-time recovery, or migrate --to sqlite:// (docs/backup.md)", cmd, endpoint.RedactEndpoint(cfg.Endpoint))
	}
	return d, nil
}

// restoreFrom is `restore --from URL`.
func restoreFrom(ctx context.Context, f *sqliteFlags, o *objstoreFlags, from, at string, rev int64, force, keep bool, stdout io.Writer) error {
	if f.fs.NArg() != 0 {
		return fmt.Errorf("restore --from: takes no FILE, got %q", f.fs.Args())
	}
	var t replicate.Target
	if at != "" {
		if rev != 0 {
			return errors.New("restore: give --at or --revision, not both")
		}
		tm, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return fmt.Errorf("restore --at %q: want RFC 3339 with milliseconds, e.g. 2026-12-07T14:03:05.250Z: %w", at, err)
		}
		t.At = tm
	}
	if rev < 0 {
		return fmt.Errorf("restore --revision %d: want a revision", rev)
	}
	t.Rev, t.Bump = rev, !keep
	d, err := sqliteDialect("restore", f.cfg)
	if err != nil {
		return err
	}
	st, err := objstore.Open(ctx, from, o.opts)
	if err != nil {
		return fmt.Errorf("restore --from: %w", err)
	}
	start := time.Now()
	info, err := replicate.Restore(ctx, st, d, t, force)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s from %s at revision %d (base %s, %d segments, %d rows replayed) in %s\n",
		d.Path, st, info.Target, info.Base, info.Segments, info.Rows, time.Since(start).Round(time.Millisecond))
	writeBackupInfo(stdout, info.BackupInfo)
	fmt.Fprintf(stdout, "  lineage   none: serve --replicate gives it a new one; replicate it to a prefix of its own\n")
	switch {
	case info.Bumped != 0:
		fmt.Fprintf(stdout, "  bumped    to revision %d, a billion past %d (the bucket's last, or a replaced store's), marked compacted: kube-apiserver's and other clients' watches are cancelled and they relist\n",
			info.Bumped, info.Bumped-mvcc.RevisionBump)
	case keep:
		fmt.Fprintf(stdout, "  revision  kept (--keep-revision): if a client of the replicated store uses this copy, restart kube-apiserver and every watcher first (docs/backup.md)\n")
	}
	return nil
}

// ReplicaCommand is `quantykube replica`.
type ReplicaCommand struct{}

// Usage is replica's help.
func (ReplicaCommand) Usage() string {
	return `quantykube replica ls URL [--ca-file FILE] [--encryption-key-file FILE]

Lists what the object store at URL holds of a replicated store (serve
--replicate): its lineage, then each base (the revision it holds and the
time of its last commit) and each segment (the revisions and commit times it
covers), oldest first. 'quantykube restore --from URL' restores from them.`
}

// Run lists the replica.
func (c ReplicaCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var o objstoreFlags
	o.register(fs, "")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 2 || fs.Arg(0) != "ls" {
		return fmt.Errorf("replica: want 'ls URL', got %q", fs.Args())
	}
	st, err := objstore.Open(ctx, fs.Arg(1), o.opts)
	if err != nil {
		return fmt.Errorf("replica ls: %w", err)
	}
	l, err := replicate.List(ctx, st)
	if err != nil {
		return fmt.Errorf("replica ls: %w", err)
	}
	if l.Lineage == "" {
		fmt.Fprintf(stdout, "%s holds no replica\n", st)
		return nil
	}
	ts := func(ms int64) string {
		if ms == 0 {
			return "-" // a base of a store with no commit yet
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	fmt.Fprintf(stdout, "lineage %s in %s\n", l.Lineage, st)
	fmt.Fprintf(stdout, "%-8s %10s %10s  %-24s  %-24s %10s\n", "KIND", "FIRST", "LAST", "FROM", "TO", "BYTES")
	for _, b := range l.Bases {
		fmt.Fprintf(stdout, "%-8s %10s %10d  %-24s  %-24s %10d\n", "base", "-", b.Rev, "-", ts(b.UnixMs), b.Size)
	}
	for _, s := range l.Segments {
		fmt.Fprintf(stdout, "%-8s %10d %10d  %-24s  %-24s %10d\n", "segment", s.First, s.Last, ts(s.T0), ts(s.T1), s.Size)
	}
	return nil
}
