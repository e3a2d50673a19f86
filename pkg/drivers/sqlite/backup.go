package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/quantyroot/quantykube/pkg/internal/sqltrace"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// BackupInfo describes a backup file.
type BackupInfo struct {
	// Rev is the store's revision in the file, Keys its live keys, LogRows
	// its history (one row per key change it retains).
	Rev, Keys, LogRows int64
	// Schema is the file's schema version.
	Schema int64
	// Bytes is the file's size.
	Bytes int64
	// A restore over a store at a higher revision than the backup's moved
	// the restored revision from Rev to Bumped, past the replaced store's
	// ReplacedRev, and marked it compacted (ADR-027); a restore told what
	// the copy's original handed out (RestoreOptions.HandedOut) moved it
	// past that too. ReplacedErr says why the replaced store's revision
	// could not be read.
	ReplacedRev, Bumped int64
	ReplacedErr         error
}

// Backup writes a consistent copy of the database, history included, to
// dest, which must not exist. It works while a server runs on the
// database: it needs no lock, only reads, and in WAL mode its read
// transaction never blocks the server's writer (only checkpoints wait for
// it). VACUUM INTO copies what that one transaction sees, compacted; the
// copy is written beside dest, checked (PRAGMA integrity_check), synced and
// then renamed to dest, so dest is either absent or a whole backup. Like
// the store, the backup is readable by its owner only.
func (d *Dialect) Backup(ctx context.Context, dest string) (BackupInfo, error) {
	if _, err := os.Stat(d.Path); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return BackupInfo{}, fmt.Errorf("backup: %s exists: give a new file", dest)
	}
	tmp := dest + ".partial"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	if err := vacuumInto(ctx, d.Path, tmp); err != nil {
		return BackupInfo{}, fmt.Errorf("backup: copy %s: %w", d.Path, err)
	}
	info, err := d.Verify(ctx, tmp)
	if err == nil {
		err = syncRename(tmp, dest)
	}
	if err != nil {
		os.Remove(tmp)
		return BackupInfo{}, fmt.Errorf("backup: %w", err)
	}
	return info, nil
}

// Verify checks that file is a whole QuantyKube database this binary can
// serve (PRAGMA integrity_check, a schema no newer than its own) and
// describes it. It only reads file.
func (d *Dialect) Verify(ctx context.Context, file string) (BackupInfo, error) {
	var info BackupInfo
	st, err := os.Stat(file)
	if err != nil {
		return info, err
	}
	info.Bytes = st.Size()
	db, err := OpenReadOnly(file)
	if err != nil {
		return info, err
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, integrityCheckSQL).Scan(&check); err != nil {
		return info, fmt.Errorf("%s: integrity check: %w", file, err)
	}
	if check != "ok" {
		return info, fmt.Errorf("%s: integrity check failed: %s", file, check)
	}
	err = db.QueryRowContext(ctx, describeSQL).Scan(&info.Schema, &info.Rev, &info.Keys, &info.LogRows)
	if err != nil {
		return info, fmt.Errorf("%s is not a QuantyKube database: %w", file, err)
	}
	if known := int64(len(d.Migrations())); info.Schema > known {
		return info, fmt.Errorf("%s has schema version %d, newer than this quantykube's %d: use a newer quantykube", file, info.Schema, known)
	}
	return info, nil
}

// Restore makes the backup file the database, after checking it (Verify).
// It holds the database's lock meanwhile, so it refuses while a server
// runs on the database, and no server starts on a half-restored file. The
// restored database is a copy of file made as Backup makes one (VACUUM
// INTO, 0600), so that it includes what a WAL beside file holds. An
// existing database is replaced only when replace is set; its WAL goes with
// it, since SQLite would replay that WAL into the restored file. Until then
// ctx can stop the restore, and the database stays as it was.
//
// A replaced database at a higher revision than the backup's has handed
// those revisions out, and clients hold them: the restored copy's revision
// is moved RevisionBump past it and marked compacted before it replaces
// the database, so no revision names two states and every watch is
// cancelled (ADR-027).
func (d *Dialect) Restore(ctx context.Context, file string, replace bool) (BackupInfo, error) {
	return d.RestoreWith(ctx, file, RestoreOptions{Replace: replace})
}

// RestoreOptions says how RestoreWith puts a copy in place.
type RestoreOptions struct {
	// Replace lets the restore replace an existing database.
	Replace bool
	// HandedOut, when set, is the highest revision the copy's original is
	// known to have handed out, where the original is lost and may have
	// handed out more (a store restored from its replica: the bucket's
	// last revision is up to the RPO behind what it acknowledged). The
	// restored revision is moved RevisionBump past it, and past a
	// replaced store's, and marked compacted, even when HandedOut is the
	// copy's own revision.
	HandedOut int64
}

// RestoreWith is Restore with options.
func (d *Dialect) RestoreWith(ctx context.Context, file string, o RestoreOptions) (BackupInfo, error) {
	replace := o.Replace
	info, err := d.Verify(ctx, file)
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	if dir := filepath.Dir(d.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return info, fmt.Errorf("restore: %w", err)
		}
	}
	real := d.realPath()
	lock, err := lockFile(real + "-lock")
	if err != nil {
		return info, fmt.Errorf("restore: %w", err)
	}
	defer lock.Close()
	_, err = os.Stat(real)
	exists := err == nil
	if exists && !replace {
		return info, fmt.Errorf("restore: %s exists: stop its server, back it up if it matters, and restore with --force to replace it", d.Path)
	}
	if exists {
		// Read before its WAL goes: the revisions it handed out are what
		// the restored store must not hand out again.
		info.ReplacedRev, info.ReplacedErr = readRev(ctx, real)
	}
	tmp := real + ".restoring"
	// A restore that crashed left it; the lock says none is running.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("restore: %w", err)
	}
	if err := vacuumInto(ctx, file, tmp); err != nil {
		return info, fmt.Errorf("restore: copy %s: %w", file, err)
	}
	if past := max(info.ReplacedRev, o.HandedOut); info.ReplacedRev > info.Rev || o.HandedOut > 0 {
		info.Bumped = max(past, info.Rev) + mvcc.RevisionBump
	}
	if err := d.reset(ctx, tmp, info.Bumped); err != nil {
		os.Remove(tmp)
		return info, fmt.Errorf("restore: %w", err)
	}
	if st, err := os.Stat(tmp); err == nil {
		info.Bytes = st.Size()
	}
	// The last moment to stop: from here on the old database goes.
	if err := ctx.Err(); err != nil {
		os.Remove(tmp)
		return info, fmt.Errorf("restore: %w", err)
	}
	for _, stale := range []string{real + "-wal", real + "-shm"} {
		if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
			os.Remove(tmp)
			return info, fmt.Errorf("restore: %w", err)
		}
	}
	if err := syncRename(tmp, real); err != nil {
		os.Remove(tmp)
		return info, fmt.Errorf("restore: %w", err)
	}
	return info, nil
}

// readRev reads the revision of the store in file.
func readRev(ctx context.Context, file string) (int64, error) {
	db, err := OpenReadOnly(file)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var rev int64
	err = db.QueryRowContext(ctx, revSQL).Scan(&rev)
	return rev, err
}

// reset prepares the restored copy in file, in one transaction: it drops
// its replication lineage, so that `serve --replicate` gives it a new one
// and refuses the replica of the history it left (ADR-044), and, when rev
// is not 0, moves its revision to rev and marks every revision below it
// compacted (mvcc.BumpRevision).
func (d *Dialect) reset(ctx context.Context, file string, rev int64) error {
	db, err := sqltrace.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(30000)")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, dropLineageSQL); err != nil {
		return fmt.Errorf("drop the replication lineage: %w", err)
	}
	if rev != 0 {
		if err := mvcc.BumpRevision(ctx, tx, d, rev); err != nil {
			return fmt.Errorf("move the revision past %d: %w", rev-mvcc.RevisionBump, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	// The change in the file itself, none in a WAL beside it that the
	// rename would leave behind.
	_, err = db.ExecContext(ctx, checkpointTruncateSQL)
	return err
}

// OpenReadOnly opens an SQLite file (QuantyKube's, or another program's,
// such as kine's) for reading only, without the server's lock: it can
// neither change the file nor create it. In WAL mode its readers see one
// snapshot per transaction and never block a writer.
func OpenReadOnly(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(30000)")
	db, err := sqltrace.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// vacuumInto writes a compacted copy of the database from (its WAL
// included) to the new file to, made 0600: SQLite would give it the
// default mode, readable by everyone. VACUUM INTO takes an existing file
// only when it is empty, which createPrivate makes it. On failure to is
// removed.
func vacuumInto(ctx context.Context, from, to string) error {
	if err := createPrivate(to); err != nil {
		return err
	}
	db, err := OpenReadOnly(from)
	if err == nil {
		_, err = db.ExecContext(ctx, vacuumIntoSQL, to)
		db.Close()
	}
	if err != nil {
		os.Remove(to)
		return err
	}
	return nil
}

// createPrivate creates path, empty and readable by its owner only; it
// must not exist.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// syncRename makes from durable, then renames it to to and makes the
// rename durable: after a crash, to is the old file or the whole new one.
func syncRename(from, to string) error {
	f, err := os.OpenFile(from, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(to))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
