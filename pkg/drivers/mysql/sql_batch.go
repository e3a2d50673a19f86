package mysql

// The dialect's own statements, by what runs them: the check of an
// assumption, the batch's writes, the locks of migrations and imports, and
// the servers' rows. The engine's statements are in sql.go.

import (
	"fmt"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
)

// The check of an assumption (CommitAssumed), under the lock: meta holds
// the state assumed, writer's mark included (mvcc.WriterMarker), which
// proves the rows of the keys assumed present; the keys assumed absent
// are checked by the writes themselves (createHead fails on a row that
// exists) or, for those the batch does not create, by assumedAbsentSQL.
// Each statement of a query costs MariaDB a fixed 50-130 µs, so the check
// is as few as it can be: 30 keys' rows checked in three statements cost
// MariaDB 50-56 µs of CPU per write, meta and the mark in two 36-45
// (ADR-035).
const (
	// assumedMetaSQL sets meta's four rows to the batch's end state
	// (revision, floor, time, mark), each only where it holds the assumed
	// value: it matches the four rows exactly when meta held (a row
	// matched counts even when set to what it held: ClientFoundRows).
	assumedMetaSQL = `UPDATE meta SET value = CASE name WHEN 'rev' THEN ? WHEN 'compact' THEN ? WHEN 'last_unix_ms' THEN ? ELSE ? END
		WHERE (name = 'rev' AND value = ?) OR (name = 'compact' AND value = ?) OR (name = 'last_unix_ms' AND value = ?) OR (name = 'last_writer' AND value = ?)`
	// assumedMetaHeldSQL fails (a duplicate of meta's rev row) unless the
	// statement before it matched the four rows: MySQL then runs none of
	// the statements after it.
	assumedMetaHeldSQL = `INSERT INTO meta (name, value) SELECT 'rev', 0 FROM DUAL WHERE ROW_COUNT() <> 4`
)

// assumedAbsentSQL fails (a duplicate of meta's compact row) when one of a
// list of keys has a current row.
var assumedAbsentSQL = keyLists(func(n int) string {
	return `INSERT INTO meta (name, value) SELECT 'compact', 0 FROM DUAL WHERE EXISTS (SELECT 1 FROM current c WHERE c.key IN (` + generic.List(n) + `))`
})

// The batch's writes: the rows' statements are a head, rows separated by
// commas, and a tail (script.rows).
const (
	// logHead adds rows (logRow each) to the log.
	logHead = `INSERT INTO log (rev, sub, log.key, value, create_rev, version, lease, deleted, unix_ms) VALUES `
	logRow  = "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
	// putHead and putTail put current rows (putRow each); createHead
	// alone adds rows, and fails on a key that has one.
	putHead    = `INSERT INTO current (current.key, create_rev, mod_rev, version, lease) VALUES `
	putTail    = " ON DUPLICATE KEY UPDATE create_rev = VALUES(create_rev), mod_rev = VALUES(mod_rev), version = VALUES(version), lease = VALUES(lease)"
	createHead = putHead
	putRow     = "(?, ?, ?, ?, ?)"
	// deleteHead and deleteTail delete the current rows of keys ("?" each).
	deleteHead = `DELETE FROM current WHERE current.key IN (`
	deleteTail = ")"
	// setRevCompactSQL sets meta's revision, its time, the writer's mark
	// and the compacted revision (the mark's row made if missing).
	setRevCompactSQL = `INSERT INTO meta (name, value) VALUES ('rev', ?), ('last_unix_ms', ?), ('last_writer', ?), ('compact', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)`
	// setRevSQL sets meta's revision, its time and the writer's mark.
	setRevSQL = `INSERT INTO meta (name, value) VALUES ('rev', ?), ('last_unix_ms', ?), ('last_writer', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)`
	// setCompactSQL sets meta's compacted revision.
	setCompactSQL = `UPDATE meta SET value = ? WHERE name = 'compact'`
)

// Named locks (GET_LOCK) are the server's, not the database's: their
// names carry the database's name, hashed to stay within MySQL's 64
// characters. A named lock belongs to a session; the connections the
// dialect opens release a lock taken in a transaction when it ends
// (conn.releaseLocks), so they last as long as PostgreSQL's
// transaction-scoped advisory locks, and a crashed process's go with its
// session.
const (
	migrateLock = `CONCAT('quantykube/migrate/', MD5(DATABASE()))`
	importLock  = `CONCAT('quantykube/import/', MD5(DATABASE()))`
)

// The migration's and the import's locks (shared.go).
const (
	// importLockFreeSQL says whether the import lock is free or this
	// session's.
	importLockFreeSQL = `SELECT COALESCE(IS_USED_LOCK(` + importLock + `) = CONNECTION_ID(), TRUE)`
	// importLockSQL takes the import lock without waiting: 1 when it got it.
	importLockSQL = `SELECT GET_LOCK(` + importLock + `, 0)`
	// hasMetaSQL counts the database's tables named meta (0 or 1).
	hasMetaSQL = `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'meta'`
)

// migrateLockSQL takes the migration lock, waiting up to migrateWait
// seconds: 1 when it got it.
var migrateLockSQL = fmt.Sprintf(`SELECT GET_LOCK(%s, %d)`, migrateLock, migrateWait)

// Leases, on the database's clock.
const (
	// leasesSQL reads every lease's ID, TTL and the milliseconds it has
	// left.
	leasesSQL = `SELECT id, ttl, renewed_ms + ttl * 1000 - ` + nowMs + ` FROM leases`
	// renewLeaseSQL renews a lease that has not expired and returns its
	// TTL, as a row only when it did.
	renewLeaseSQL = `UPDATE leases SET renewed_ms = ` + nowMs + ` WHERE id = ? AND renewed_ms + ttl * 1000 > ` + nowMs + `;
		SELECT ttl FROM leases WHERE id = ? AND ROW_COUNT() > 0`
	// leaseExpiredSQL says whether a lease has expired, and locks its row.
	leaseExpiredSQL = `SELECT renewed_ms + ttl * 1000 <= ` + nowMs + ` FROM leases WHERE id = ? FOR UPDATE`
	// startLeasesSQL renews every lease as of now.
	startLeasesSQL = `UPDATE leases SET renewed_ms = ` + nowMs
)

// The servers' rows in meta (shared.go).

// serverRowDeleteSQL removes a server's row and its applied revision's.
const serverRowDeleteSQL = `DELETE FROM meta WHERE name IN (?, ?, ?)`

// serverRowUpsertSQL writes a server's row, expiring serverExpiry from now.
var serverRowUpsertSQL = fmt.Sprintf(`INSERT INTO meta (name, value) VALUES (?, %s + %d) ON DUPLICATE KEY UPDATE value = VALUES(value)`, nowMs, serverExpiry.Milliseconds())

// serverRowsPruneUpsertSQL is serverRowUpsertSQL after statements that
// remove the rows expired for serverRowsKept and their applied
// revisions' rows, in one query. MySQL reads the table a DELETE writes
// only through a derived table, which it materializes first.
var serverRowsPruneUpsertSQL = fmt.Sprintf(`DELETE FROM meta WHERE name LIKE '%[1]s%%/%%' AND SUBSTRING_INDEX(name, '/', 2) IN
	(SELECT n FROM (SELECT name AS n FROM meta WHERE name LIKE '%[1]s%%' AND name NOT LIKE '%[1]s%%/%%' AND value < %[2]s - %[3]d) AS gone);
DELETE FROM meta WHERE name LIKE '%[1]s%%' AND name NOT LIKE '%[1]s%%/%%' AND value < %[2]s - %[3]d;
`, serverRowPrefix, nowMs, serverRowsKept.Milliseconds()) + serverRowUpsertSQL

// serverAppliedUpsertSQL records the revision a server has applied (the
// second argument) in its row named first and when, on the database's
// clock, in its row named third.
var serverAppliedUpsertSQL = fmt.Sprintf(`INSERT INTO meta (name, value) VALUES (?, ?), (?, %s) ON DUPLICATE KEY UPDATE value = VALUES(value)`, nowMs)

// serverRowsLiveSQL counts the servers whose rows have not expired, and
// the seconds the latest has left; the applied revisions' rows (a second
// '/') are not expiries.
var serverRowsLiveSQL = fmt.Sprintf(`SELECT COUNT(*), COALESCE(MAX(value) - %[1]s, 0) DIV 1000 FROM meta WHERE name LIKE '%[2]s%%' AND name NOT LIKE '%[2]s%%/%%' AND value > %[1]s`,
	nowMs, serverRowPrefix)

// Maintenance and inspection.
const (
	// sizeSQL is the database's size and that of QuantyKube's tables.
	sizeSQL = `SELECT CAST(COALESCE(SUM(data_length + index_length + data_free), 0) AS SIGNED),
		CAST(COALESCE(SUM(CASE WHEN table_name IN ('log', 'current', 'leases', 'meta', 'retention') THEN data_length + index_length ELSE 0 END), 0) AS SIGNED)
		FROM information_schema.tables WHERE table_schema = DATABASE()`
	// defragmentSQL rebuilds QuantyKube's tables.
	defragmentSQL = `OPTIMIZE TABLE log, current, leases, meta, retention`
	// tablesSQL lists the tables and views of the database.
	tablesSQL = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`
)
