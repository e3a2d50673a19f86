// Package sqlite is the embedded default dialect: modernc.org/sqlite (pure
// Go), WAL journal, fsync at every commit.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/internal/sqltrace"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Options tune the dialect; zero values take the defaults.
type Options struct {
	// Pool sizes the read pool (default max(4, 2*GOMAXPROCS)); the writer
	// always has one connection of its own.
	Pool generic.ConnectionPoolConfig
	// PlainWAL writes the WAL through SQLite's own unix VFS, each frame
	// as SQLite writes it, instead of gathering the writer's WAL writes
	// (walvfs.go, ADR-018): the way back if a modernc.org/sqlite or libc
	// upgrade breaks what the gathering VFS relies on.
	PlainWAL bool
}

// Dialect opens one SQLite file.
type Dialect struct {
	Path string
	opts Options
	// lock is held while the database is open: the engine keeps the live
	// index in memory and assigns revisions in one process, so a second
	// server on the same file must not start.
	lock *os.File
}

// New parses sqlite://path (relative or absolute). Query parameters (kine
// users pass _journal, cache, _busy_timeout, _txlock) are ignored:
// durability settings are not the user's to weaken.
func New(dsn string, opts Options) (*Dialect, error) {
	rest, ok := strings.CutPrefix(dsn, "sqlite://")
	if !ok {
		return nil, fmt.Errorf("sqlite: endpoint %q must start with sqlite://", dsn)
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest = rest[:i]
	}
	if rest == "" {
		return nil, fmt.Errorf("sqlite: endpoint %q names no file", dsn)
	}
	return &Dialect{Path: rest, opts: opts}, nil
}

func (d *Dialect) Name() string { return "sqlite" }

func (d *Dialect) dsn(extra ...string) string {
	q := url.Values{}
	// synchronous(FULL) in WAL mode fsyncs the WAL at every commit: an
	// acknowledged write survives power loss, not just a process crash.
	for _, p := range append([]string{"busy_timeout(30000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(OFF)"}, extra...) {
		q.Add("_pragma", p)
	}
	return "file:" + d.Path + "?" + q.Encode()
}

// readerCacheKiB is each reader connection's page cache, a quarter of
// SQLite's default. SQLite empties a connection's cache when its next read
// finds that anything was committed since its last, which on a live
// cluster is nearly every read. Emptying frees every cached page back to
// modernc.org/memory, which keeps 4 MiB of freed memory mapped (its pages
// sit in 8 KiB slots, and the writer's churn shares them) and hands the
// rest to the OS with madvise, so the next read pays a page fault on each
// page it caches again. Once a cache is full SQLite recycles the least
// recently used pages and allocates nothing, so the smaller the cache,
// the less each read after a commit allocates. A History Log of 1,000
// revisions reads about 1,850 pages: with an 8 MiB cache, which
// held them all, it took 3x as long after a commit as with SQLite's
// default, and this cache takes a fifth to a third off that. Only at
// rest, in a store nothing writes to, was a bigger cache faster
// (docs/benchmarks/history-reads.md).
const readerCacheKiB = 500

func (d *Dialect) Open(ctx context.Context) (writer, reader *sql.DB, err error) {
	if dir := filepath.Dir(d.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("sqlite: %w", err)
		}
	}
	if d.lock, err = lockFile(d.realPath() + "-lock"); err != nil {
		return nil, nil, fmt.Errorf("sqlite: %w", err)
	}
	// The database holds every Secret: made 0600 here, since SQLite would
	// make it 0644. Its WAL and shared memory take its mode (SQLite on
	// Unix gives them the database file's permissions).
	if err := createPrivate(d.Path); err != nil && !errors.Is(err, os.ErrExist) {
		d.Close()
		return nil, nil, fmt.Errorf("sqlite: create %s: %w", d.Path, err)
	}
	if err := makePrivate(d.Path); err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("sqlite: %w", err)
	}
	wdsn := d.dsn() + "&_txlock=immediate"
	vfs, err := "", error(nil)
	if !d.opts.PlainWAL {
		vfs, err = gatheringVFS()
	}
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	if vfs != "" {
		// Only the writer writes the WAL (ADR-018).
		wdsn += "&vfs=" + vfs
	}
	writer, err = sqltrace.Open("sqlite", wdsn)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	if err := writer.PingContext(ctx); err != nil {
		writer.Close()
		d.Close()
		return nil, nil, fmt.Errorf("sqlite: open %s: %w", d.Path, err)
	}
	readers := d.opts.Pool.MaxOpen
	if readers <= 0 {
		readers = max(4, 2*runtime.GOMAXPROCS(0))
	}
	reader, err = sqltrace.Open("sqlite", d.dsn("query_only(1)", fmt.Sprintf("cache_size(%d)", -readerCacheKiB)))
	if err != nil {
		writer.Close()
		d.Close()
		return nil, nil, err
	}
	d.opts.Pool.Apply(reader, readers)
	return writer, reader, nil
}

// makePrivate takes group and other access away from a store made before
// stores were created 0600 (or copied in with a wider mode): its files
// hold every Secret.
func makePrivate(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if mode := st.Mode().Perm(); mode&0o077 != 0 {
			if err := os.Chmod(p, mode&^0o077); err != nil {
				return fmt.Errorf("make %s private: %w", p, err)
			}
			slog.Warn("the store's file was readable by others: made it private", "file", p, "was", fmt.Sprintf("%#o", mode), "now", fmt.Sprintf("%#o", mode&^0o077))
		}
	}
	return nil
}

// realPath is the database file itself: its lock is named after it, so
// that two paths to it (a symlink) still meet on one lock.
func (d *Dialect) realPath() string {
	if r, err := filepath.EvalSymlinks(d.Path); err == nil {
		return r
	}
	return d.Path
}

// Close releases the lock on the database; the store calls it after closing
// its connections.
func (d *Dialect) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

func (d *Dialect) Migrations() [][]string {
	return [][]string{{
		// log: one row per key change. id follows (rev, sub) order because a
		// single writer appends; it keeps the table a compact rowid b-tree.
		`CREATE TABLE log (
			id INTEGER PRIMARY KEY,
			rev INTEGER NOT NULL,
			sub INTEGER NOT NULL,
			key BLOB NOT NULL,
			value BLOB,
			create_rev INTEGER NOT NULL,
			version INTEGER NOT NULL,
			lease INTEGER NOT NULL,
			deleted INTEGER NOT NULL,
			unix_ms INTEGER NOT NULL)`,
		`CREATE UNIQUE INDEX log_rev ON log (rev, sub)`,
		`CREATE INDEX log_key_rev ON log (key, rev)`,
		`CREATE TABLE current (
			key BLOB NOT NULL PRIMARY KEY,
			value BLOB,
			create_rev INTEGER NOT NULL,
			mod_rev INTEGER NOT NULL,
			version INTEGER NOT NULL,
			lease INTEGER NOT NULL)`,
		`CREATE INDEX current_lease ON current (lease) WHERE lease <> 0`,
		`CREATE TABLE leases (id INTEGER PRIMARY KEY, ttl INTEGER NOT NULL)`,
	}, {
		// History: revision by time, and retention's per-rule progress.
		`CREATE INDEX log_unix_ms ON log (unix_ms, rev)`,
		`CREATE TABLE retention (
			prefix BLOB NOT NULL PRIMARY KEY,
			floor INTEGER NOT NULL,
			floor_unix_ms INTEGER NOT NULL,
			cursor INTEGER NOT NULL)`,
		`INSERT INTO meta (name, value) VALUES ('retain_floor', 0)`,
	}, {
		// Each value is stored once, in the log (ADR-014): a live key's
		// value is its log row at (key, mod_rev). mvcc checks first that
		// every current row has that row.
		`ALTER TABLE current DROP COLUMN value`,
	}}
}

// AutoCheckpoint sets the connection's wal_autocheckpoint
// (mvcc.Checkpointer): SQLite's default, which the writer's connection
// keeps while it checkpoints after its own commits, or off.
func (d *Dialect) AutoCheckpoint(ctx context.Context, ex mvcc.Execer, on bool) error {
	q := autoCheckpointOffSQL
	if on {
		q = autoCheckpointOnSQL
	}
	if _, err := ex.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("sqlite: %s: %w", q, err)
	}
	return nil
}

// Checkpoint runs a passive checkpoint (mvcc.Checkpointer): it copies what
// no reader still needs from the WAL and waits for no lock.
func (d *Dialect) Checkpoint(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, checkpointSQL); err != nil {
		return fmt.Errorf("sqlite: checkpoint: %w", err)
	}
	return nil
}

// LazyRows (mvcc.LazyRows): SQLite runs in the process and steps a
// query one row at a time, as database/sql asks for rows.
func (d *Dialect) LazyRows() {}

// OwnedBlobs (mvcc.OwnedBlobs): modernc.org/sqlite copies every BLOB
// column of every row into a new slice (rows.Next, columnBlob), which it
// never writes again; TestDriverBlobsAreOwned checks it.
func (d *Dialect) OwnedBlobs() {}

func (d *Dialect) Size(ctx context.Context, db *sql.DB) (total, inUse int64, err error) {
	var pages, free, size int64
	err = db.QueryRowContext(ctx, sizeSQL).Scan(&pages, &free, &size)
	return pages * size, (pages - free) * size, err
}

func (d *Dialect) Defragment(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, defragmentSQL)
	return err
}

// Tables lists the database's tables and views, SQLite's own left out,
// read-only: a file that does not exist has none and is not created.
func (d *Dialect) Tables(ctx context.Context) ([]string, error) {
	if _, err := os.Stat(d.Path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	db, err := OpenReadOnly(d.Path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	defer db.Close()
	names, err := generic.QueryStrings(ctx, db, tablesSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", d.Path, err)
	}
	return names, nil
}

var _ mvcc.Dialect = (*Dialect)(nil)

// OpenReadOnly opens the store's file for reading only
// (mvcc.ReadOnlyDialect), without the server's lock, beside a server
// that may be running on it: WAL readers never block its writer.
func (d *Dialect) OpenReadOnly(ctx context.Context) (*sql.DB, error) {
	if _, err := os.Stat(d.Path); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db, err := OpenReadOnly(d.Path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", d.Path, err)
	}
	return db, nil
}

var _ mvcc.ReadOnlyDialect = (*Dialect)(nil)
