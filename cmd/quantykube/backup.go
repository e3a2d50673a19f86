package main

// `quantykube backup` and `quantykube restore`: a consistent copy of a
// SQLite store, history included, taken while the server runs, and that
// copy put back (pkg/drivers/sqlite).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/endpoint"
)

// BackupCommand is `quantykube backup`.
type BackupCommand struct{}

// Usage is backup's help.
func (BackupCommand) Usage() string {
	return `quantykube backup [--endpoint sqlite://PATH] FILE

Writes a consistent copy of a SQLite store, history included, to FILE (which
must not exist), while 'quantykube serve' keeps running on it: the copy is
one read transaction (VACUUM INTO), which takes no lock the server needs and
never blocks its writes. The copy is checked (PRAGMA integrity_check) before
it is renamed to FILE. 'quantykube restore FILE' puts it back; 'quantykube
serve --endpoint sqlite://FILE' serves it as it is.

PostgreSQL stores are backed up with PostgreSQL's tools (pg_dump, or base
backups and WAL archiving for point-in-time recovery): docs/backup.md.`
}

// RestoreCommand is `quantykube restore`.
type RestoreCommand struct{}

// Usage is restore's help.
func (RestoreCommand) Usage() string {
	return `quantykube restore FILE [--endpoint sqlite://PATH] [--force]
quantykube restore --from URL [--at TIME | --revision N] [--endpoint sqlite://PATH] [--force]

Makes the backup FILE the SQLite store at --endpoint, after checking it
(PRAGMA integrity_check, a schema this quantykube can serve). The server must
be stopped: restore takes its lock. When it replaces a store at a higher
revision than the backup's, the restored store's revision is moved a
billion past that one and marked compacted, so that no revision is handed
out twice: clients' watches are cancelled as compacted and they relist
(docs/backup.md).

With --from, the store is rebuilt from what 'serve --replicate URL' wrote:
the newest base at or before the point, then the revisions after it, each
object checked against its checksum, up to --revision N, or up to the last
revision committed at or before --at TIME (RFC 3339 with milliseconds,
e.g. 2026-12-07T14:03:05.250Z), or the newest shipped. The store has the
same revisions and the history before the point, and a new lineage: to
replicate it, give serve --replicate a new prefix. Its revision is then
moved a billion past the bucket's last and marked compacted, as etcdutl's
snapshot restore --bump-revision --mark-compacted: the lost store handed
out revisions past what it shipped, and its clients (kube-apiserver's
watch cache, informers) hold them; their watches are cancelled and they
relist. Objects keep their revisions, and History its rows; reads of the
etcd API below the new revision answer compacted. --keep-revision leaves
the revision as restored, for a copy no client of the original uses.
Nothing is written to the store on any error.`
}

// sqliteFlags are the flags of backup and restore: the store, which must be
// SQLite.
type sqliteFlags struct {
	fs  *pflag.FlagSet
	cfg endpoint.Config
}

func newSQLiteFlags(c Command, stderr io.Writer, what string) *sqliteFlags {
	f := &sqliteFlags{fs: newFlagSet(c, stderr)}
	f.fs.StringVar(&f.cfg.Endpoint, "endpoint", endpoint.DefaultEndpoint, what+": sqlite://PATH or a path")
	return f
}

// parse parses args, which must be one FILE, and returns the store's
// dialect and FILE; done is set after --help.
func (f *sqliteFlags) parse(cmd string, args []string) (d *sqlite.Dialect, file string, done bool, err error) {
	if err := f.fs.Parse(args); err != nil {
		err = flagError(err)
		return nil, "", err == nil, err
	}
	if f.fs.NArg() != 1 {
		return nil, "", false, fmt.Errorf("%s: want exactly one FILE, got %d arguments", cmd, f.fs.NArg())
	}
	md, err := endpoint.NewDialect(f.cfg)
	if err != nil {
		return nil, "", false, fmt.Errorf("%s: %w", cmd, err)
	}
	d, ok := md.(*sqlite.Dialect)
	if !ok {
		return nil, "", false, fmt.Errorf("%s: %s is not a SQLite store: back PostgreSQL up with pg_dump or base backups (docs/backup.md)", cmd, endpoint.RedactEndpoint(f.cfg.Endpoint))
	}
	return d, f.fs.Arg(0), false, nil
}

// Run backs the store up to FILE.
func (c BackupCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d, file, done, err := newSQLiteFlags(c, stderr, "the store to back up").parse("backup", args)
	if done || err != nil {
		return err
	}
	info, err := d.Backup(ctx, file)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s\n", d.Path, file)
	writeBackupInfo(stdout, info)
	return nil
}

// Run puts the backup FILE back.
func (c RestoreCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newSQLiteFlags(c, stderr, "the store to restore")
	force := f.fs.Bool("force", false, "replace the store if it exists (its WAL goes with it)")
	from := f.fs.String("from", "", "restore from object storage: the URL serve --replicate wrote to (default: none, restore FILE)")
	at := f.fs.String("at", "", "with --from: the time to restore, RFC 3339 with milliseconds (default: the newest shipped)")
	rev := f.fs.Int64("revision", 0, "with --from: the revision to restore (default: the newest shipped)")
	keep := f.fs.Bool("keep-revision", false, "with --from: keep the restored revision as it is, instead of moving it a billion past the bucket's last and marking it compacted; only for a copy no client of the replicated store will use")
	var o objstoreFlags
	o.register(f.fs, "")
	if len(args) > 0 && hasFrom(args) {
		if err := f.fs.Parse(args); err != nil {
			return flagError(err)
		}
		return restoreFrom(ctx, f, &o, *from, *at, *rev, *force, *keep, stdout)
	}
	d, file, done, err := f.parse("restore", args)
	if done || err != nil {
		return err
	}
	if *at != "" || *rev != 0 || *keep {
		return errors.New("restore: --at, --revision and --keep-revision need --from")
	}
	info, err := d.Restore(ctx, file, *force)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s from %s\n", d.Path, file)
	writeBackupInfo(stdout, info)
	switch {
	case info.Bumped != 0:
		fmt.Fprintf(stdout, "  bumped    to revision %d, past the replaced store's %d, marked compacted: watches are cancelled and clients relist\n", info.Bumped, info.ReplacedRev)
	case info.ReplacedErr != nil:
		fmt.Fprintf(stdout, "  warning   the replaced store's revision could not be read (%v): the revision was not bumped; if it served revisions past %d, restart kube-apiserver (docs/backup.md)\n", info.ReplacedErr, info.Rev)
	}
	return nil
}

func writeBackupInfo(w io.Writer, info sqlite.BackupInfo) {
	fmt.Fprintf(w, "  revision  %d\n  keys      %d\n  history   %d rows\n  schema    %d\n  size      %s\n",
		info.Rev, info.Keys, info.LogRows, info.Schema, formatBytes(info.Bytes))
}

// hasFrom says whether restore's args name --from.
func hasFrom(args []string) bool {
	for _, a := range args {
		if a == "--from" || strings.HasPrefix(a, "--from=") {
			return true
		}
	}
	return false
}
