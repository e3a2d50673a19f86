package sqlite

// The dialect's SQL, by area: every statement it runs is named here, and
// what is built at run time is a func beside the statements of its area.
// The schema is Migrations' (sqlite.go); the connections' settings are
// the DSN's pragmas (dsn).

import "fmt"

// Checkpoints (mvcc.Checkpointer).

// checkpointSQL copies to the database what no reader still needs from
// the WAL, waiting for no lock.
const checkpointSQL = "PRAGMA wal_checkpoint(PASSIVE)"

// autoCheckpointSQL sets the connection's wal_autocheckpoint to pages
// (0: off).
func autoCheckpointSQL(pages int) string {
	return fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", pages)
}

// Backup, verify and restore (backup.go).
const (
	// vacuumIntoSQL writes a compacted copy of the database to a file.
	vacuumIntoSQL = `VACUUM INTO ?`
	// integrityCheckSQL checks the whole file: one row, "ok", when sound.
	integrityCheckSQL = `PRAGMA integrity_check`
	// describeSQL is the store's schema version and revision, and the
	// number of its live keys and of its log rows.
	describeSQL = `SELECT (SELECT value FROM meta WHERE name = 'schema'), (SELECT value FROM meta WHERE name = 'rev'),
		(SELECT COUNT(*) FROM current), (SELECT COUNT(*) FROM log)`
	// revSQL is the store's revision.
	revSQL = `SELECT value FROM meta WHERE name = 'rev'`
	// checkpointTruncateSQL copies the whole WAL into the database and
	// empties it.
	checkpointTruncateSQL = `PRAGMA wal_checkpoint(TRUNCATE)`
)

// Maintenance and inspection.
const (
	// sizeSQL is the database's pages, its free pages and the page size.
	sizeSQL = `SELECT (SELECT page_count FROM pragma_page_count()), (SELECT freelist_count FROM pragma_freelist_count()), (SELECT page_size FROM pragma_page_size())`
	// defragmentSQL rebuilds the database, giving free pages back.
	defragmentSQL = `VACUUM`
	// tablesSQL lists the tables and views, SQLite's own left out.
	tablesSQL = `SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND substr(name, 1, 7) <> 'sqlite_'`
)
