package mysql

// Every statement the dialect runs, by area: first the engine's
// (mvcc.Statements, ADR-039), each written out here in MySQL's syntax;
// the dialect's own are in sql_batch.go. A query with several shapes (one
// key or a range, keys only, a limit) is one statement per shape, all
// written when the package is initialized. What is built at run time is
// a batch's rows, head, rows and tail, written into one statement per
// table (rowList), and the database's name (createDatabaseSQL). The schema is Migrations'
// (schema.go).
//
// key and cursor, column names of the store's tables, are reserved words
// in MySQL: the statements write them qualified (c.key, log.key), as a
// word after a period is an identifier (MySQL's manual, "Keywords and
// Reserved Words"), or quoted in the schema.

import (
	"fmt"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Statements is the engine's SQL in MySQL's syntax (mvcc.Dialect). The
// driver sends each as text with its arguments written in
// (interpolateParams, mvcc.TextProtocol).
func (d *Dialect) Statements() *mvcc.Statements { return &statements }

// TextProtocol (mvcc.TextProtocol): the engine prepares nothing on MySQL.
// MariaDB 10.11 fails the second execution of a prepared statement whose
// correlated subquery reads a merged derived table ("Unknown column
// 'c.key'"), as a past revision's range does (changedAt), and a statement
// sent as text with its arguments costs one round trip, as a prepared
// statement's execution does.
func (d *Dialect) TextProtocol() {}

// The log's two indexes, forced where MySQL's optimizer may pick the
// other: asked for the changes of a key range since a revision it may
// pick (key, rev) and read the range's whole history (logByRev); a narrow
// range's changes are read by key (logByKey).
const (
	logByRev = `log AS l FORCE INDEX (log_rev)`
	logByKey = `log AS l FORCE INDEX (log_key_rev)`
)

// A live key's value is in its latest change's log row, (key, mod_rev),
// which the log_key_rev index finds: current holds no value of its own, so
// each value is stored once (ADR-014). liveValue reads it for current's row
// c as a correlated subquery: one index seek per row. liveCols are
// CurrentSQL's columns, keyCols the same without the value.
const (
	liveValue = `(SELECT l.value FROM log l WHERE l.key = c.key AND l.rev = c.mod_rev)`
	liveCols  = `c.key, ` + liveValue + `, c.create_rev, c.mod_rev, c.version, c.lease`
	keyCols   = `c.key, NULL, c.create_rev, c.mod_rev, c.version, c.lease`
)

// prevJoin joins each log row l to its prev_kv's row p: the key's row just
// before it.
const prevJoin = `LEFT JOIN log p ON p.id = (SELECT x.id FROM log AS x WHERE x.key = l.key AND x.rev < l.rev ORDER BY x.rev DESC LIMIT 1)`

var statements = mvcc.Statements{
	Schema: mvcc.SchemaSQL{
		CreateMeta:        `CREATE TABLE IF NOT EXISTS meta (name VARCHAR(64) NOT NULL PRIMARY KEY, value BIGINT NOT NULL)`,
		Version:           `SELECT value FROM meta WHERE name = 'schema'`,
		InsertMeta:        insertMetaSQL,
		InsertVersion:     `INSERT INTO meta (name, value) VALUES ('schema', ?)`,
		SetVersion:        `UPDATE meta SET value = ? WHERE name = 'schema'`,
		State:             `SELECT name, value FROM meta`,
		Leases:            `SELECT id, ttl FROM leases`,
		FirstWithoutValue: `SELECT c.key FROM current c WHERE NOT EXISTS (SELECT 1 FROM log l WHERE l.key = c.key AND l.rev = c.mod_rev) ORDER BY c.key LIMIT 1`,
		CountWithoutValue: `SELECT COUNT(*) FROM current c WHERE NOT EXISTS (SELECT 1 FROM log l WHERE l.key = c.key AND l.rev = c.mod_rev)`,
	},
	Meta: mvcc.MetaSQL{
		Rev:        `SELECT value FROM meta WHERE name = 'rev'`,
		RevCompact: `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact')`,
		RevFloor:   `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT MAX(value) FROM meta WHERE name IN ('compact', 'retain_floor'))`,
		LogFloor:   `SELECT MAX(value) FROM meta WHERE name IN ('retain_floor', 'reset')`,
	},
	Current: mvcc.CurrentSQL{
		Get: `SELECT ` + liveValue + `, c.create_rev, c.mod_rev, c.version, c.lease FROM current c WHERE c.key = ?`,
		Range: generic.Shapes(func(k mvcc.KeyShape) string {
			return `SELECT ` + liveCols + ` FROM current c WHERE ` + generic.KeyCond("c.key", k) + ` ORDER BY c.key`
		}),
		ByLease: `SELECT ` + liveCols + ` FROM current c WHERE c.lease = ? ORDER BY c.key`,
		All:     `SELECT ` + liveCols + ` FROM current c ORDER BY c.key`,
	},
	Lease: mvcc.LeaseSQL{
		Keys:   `SELECT c.key FROM current c WHERE c.lease = ? ORDER BY c.key`,
		Exists: `SELECT 1 FROM leases WHERE id = ?`,
		Insert: `INSERT INTO leases (id, ttl) VALUES (?, ?)`,
		Delete: `DELETE FROM leases WHERE id = ?`,
	},
	Range: mvcc.RangeSQL{
		// One statement reads one snapshot: the revision comes from meta
		// in the same SELECT, and no transaction is needed.
		Latest:     `SELECT m.rev, ` + liveCols + ` FROM (SELECT (SELECT value FROM meta WHERE name = 'rev') AS rev) m LEFT JOIN current c ON c.key = ?`,
		LatestKeys: `SELECT m.rev, ` + keyCols + ` FROM (SELECT (SELECT value FROM meta WHERE name = 'rev') AS rev) m LEFT JOIN current c ON c.key = ?`,
		Count: generic.Shapes(func(k mvcc.KeyShape) string {
			return `SELECT COUNT(*) FROM current c WHERE ` + generic.KeyCond("c.key", k)
		}),
		CountAt: generic.Shapes(func(k mvcc.KeyShape) string {
			return `SELECT (SELECT COUNT(*) FROM current c WHERE ` + generic.KeyCond("c.key", k) + ` AND c.mod_rev <= ?) + (SELECT COUNT(*) FROM (` + changedAt(k) + `) p)`
		}),
		List: list(liveCols, `p.key, p.value, p.create_rev, p.mod_rev, p.version, p.lease`),
		Keys: list(keyCols, `p.key, NULL, p.create_rev, p.mod_rev, p.version, p.lease`),
	},
	Watch: mvcc.WatchSQL{
		// A catch-up window is a few thousand revisions: read by revision.
		Events: generic.Shapes(func(k mvcc.KeyShape) string {
			return `SELECT l.rev, l.sub, l.key, l.value, l.create_rev, l.version, l.lease, l.deleted, l.unix_ms,
					p.rev, p.value, p.create_rev, p.version, p.lease, p.deleted
				FROM ` + logByRev + ` ` + prevJoin + `
				WHERE l.rev >= ? AND l.rev <= ? AND ` + generic.KeyCond("l.key", k) + ` ORDER BY l.rev, l.sub`
		}),
	},
	History: mvcc.HistorySQL{
		LogStart:  `SELECT MIN(unix_ms) FROM log`,
		RevAtTime: `SELECT rev FROM log WHERE unix_ms <= ? ORDER BY unix_ms DESC, rev DESC LIMIT 1`,
		KeyAtTime: `SELECT t.rev, l.rev, l.value, l.create_rev, l.version, l.lease, l.deleted
			FROM (SELECT (SELECT rev FROM log WHERE unix_ms <= ? ORDER BY unix_ms DESC, rev DESC LIMIT 1) AS rev) t
			LEFT JOIN log l ON l.id = (SELECT x.id FROM log x WHERE x.key = ? AND x.rev <= t.rev ORDER BY x.rev DESC LIMIT 1)`,
		RevFromTime:   `SELECT rev FROM log WHERE unix_ms >= ? ORDER BY unix_ms, rev LIMIT 1`,
		RevBeforeTime: `SELECT rev FROM log WHERE unix_ms < ? ORDER BY unix_ms DESC, rev DESC LIMIT 1`,
		KeyAsOf:       `SELECT l.rev, l.value, l.create_rev, l.version, l.lease, l.deleted FROM log l WHERE l.key = ? AND l.rev <= ? ORDER BY l.rev DESC LIMIT 1`,
	},
	LogPage: mvcc.LogPageSQL{
		KeyPage: `SELECT l.rev, l.sub, COALESCE(octet_length(l.value), 0), CASE WHEN octet_length(l.value) <= ? THEN l.value END,
				l.create_rev, l.version, l.lease, l.deleted, l.unix_ms
			FROM log AS l
			WHERE l.key = ? AND l.rev >= COALESCE((SELECT x.rev FROM log AS x WHERE x.key = ? AND x.rev < ? ORDER BY x.rev DESC LIMIT 1), 0)
			ORDER BY l.rev LIMIT ?`,
		KeyValues: `SELECT l.rev, l.value FROM log AS l
			WHERE l.key = ? AND l.rev >= ? AND l.rev <= ? AND octet_length(l.value) > ? ORDER BY l.rev`,
		Narrow: generic.Spans(func(k mvcc.KeyShape) string {
			return `SELECT COUNT(*) FROM (SELECT 1 FROM ` + logByKey + ` WHERE ` + generic.KeyCond("l.key", k) + ` LIMIT ?) AS t`
		}),
		Page:           generic.Spans(func(k mvcc.KeyShape) string { return logPage(logByRev, k) }),
		PageByKey:      generic.Spans(func(k mvcc.KeyShape) string { return logPage(logByKey, k) }),
		Window:         `SELECT l.rev, l.sub FROM ` + logByRev + ` WHERE (l.rev, l.sub) > (?, ?) ORDER BY l.rev, l.sub LIMIT 1 OFFSET ?`,
		WindowDesc:     `SELECT l.rev, l.sub FROM ` + logByRev + ` WHERE (l.rev, l.sub) < (?, ?) ORDER BY l.rev DESC, l.sub DESC LIMIT 1 OFFSET ?`,
		Values:         generic.Spans(func(k mvcc.KeyShape) string { return logValues(logByRev, k) }),
		ValuesByKey:    generic.Spans(func(k mvcc.KeyShape) string { return logValues(logByKey, k) }),
		KeyHeads:       keyHeads(""),
		KeyHeadsDesc:   keyHeads(" DESC"),
		Heads:          generic.Spans(func(k mvcc.KeyShape) string { return heads(logByRev, "", k) }),
		HeadsDesc:      generic.Spans(func(k mvcc.KeyShape) string { return heads(logByRev, " DESC", k) }),
		HeadsByKey:     generic.Spans(func(k mvcc.KeyShape) string { return heads(logByKey, "", k) }),
		HeadsByKeyDesc: generic.Spans(func(k mvcc.KeyShape) string { return heads(logByKey, " DESC", k) }),
		PrevHeads: generic.IDLists(func(n int) string {
			return `SELECT l.id, l.deleted, p.id, COALESCE(octet_length(p.value), 0), p.deleted FROM log l ` + prevJoin + `
				WHERE l.id IN (` + generic.List(n) + `)`
		}),
		Entries: generic.IDLists(func(n int) string {
			return `SELECT id, rev, value, create_rev, version, lease, deleted, unix_ms FROM log WHERE id IN (` + generic.List(n) + `)`
		}),
	},
	RangeAt: mvcc.RangeAtSQL{
		Keys: mvcc.Spans{From: keysAt(""), Between: keysAt(` AND x.key < ?`)},
		Values: generic.IDLists(func(n int) string {
			return `SELECT id, rev, value, create_rev, version, lease FROM log WHERE id IN (` + generic.List(n) + `)`
		}),
	},
	Retention: mvcc.RetentionSQL{
		Floor:       `SELECT floor, floor_unix_ms FROM retention WHERE prefix = ?`,
		AtTime:      `SELECT rev, unix_ms FROM log WHERE unix_ms <= ? ORDER BY unix_ms DESC, rev DESC LIMIT 1`,
		AtRev:       `SELECT rev, unix_ms FROM log WHERE rev >= ? ORDER BY rev LIMIT 1`,
		LastBelow:   `SELECT id FROM log WHERE rev < ? ORDER BY rev DESC, sub DESC LIMIT 1`,
		Cursor:      `SELECT r.cursor, r.floor FROM retention r WHERE r.prefix = ?`,
		InsertRule:  `INSERT INTO retention (prefix, floor, floor_unix_ms, retention.cursor) VALUES (?, 0, 0, 0)`,
		Rows:        `SELECT l.id, l.key, l.rev, l.deleted FROM log l WHERE l.id > ? AND l.id <= ? ORDER BY l.id LIMIT ?`,
		DeleteBelow: `DELETE FROM log WHERE log.key = ? AND rev < ?`,
		DeleteRow:   `DELETE FROM log WHERE id = ?`,
		SetRule:     `UPDATE retention r SET r.floor = ?, r.floor_unix_ms = ?, r.cursor = ? WHERE r.prefix = ?`,
		SetFloor:    `UPDATE meta SET value = ? WHERE name = 'retain_floor' AND value < ?`,
		Imported:    `SELECT (SELECT value FROM meta WHERE name = 'imported_rev'), (SELECT value FROM meta WHERE name = 'imported_unix_ms')`,
		RetainFloor: `SELECT value FROM meta WHERE name = 'retain_floor'`,
		Floors:      `SELECT prefix, floor, floor_unix_ms FROM retention`,
	},
	Budget: mvcc.BudgetSQL{
		History: `SELECT l.rev, l.key, octet_length(l.key) + COALESCE(octet_length(l.value), 0), l.version, l.deleted
			FROM log l WHERE l.rev > ? AND l.rev <= ? ORDER BY l.rev, l.sub`,
	},
	Usage: mvcc.UsageSQL{
		Usage: `SELECT l.key, COUNT(*), SUM(octet_length(l.key) + COALESCE(octet_length(l.value), 0)),
				SUM(CASE WHEN l.unix_ms >= ? THEN 1 ELSE 0 END), MIN(l.unix_ms), MAX(l.unix_ms)
			FROM ` + logByKey + ` GROUP BY l.key ORDER BY l.key`,
	},
	// An import's rows and revision go through WriteBatch (batch.go).
	Import: mvcc.ImportSQL{
		Size:           `SELECT (SELECT COUNT(*) FROM current), (SELECT COUNT(*) FROM log), (SELECT COUNT(*) FROM leases), (SELECT COUNT(*) FROM meta WHERE name = 'imported_rev')`,
		SetRetainFloor: `UPDATE meta SET value = ? WHERE name = 'retain_floor'`,
		InsertMeta:     insertMetaSQL,
		DeleteMeta:     `DELETE FROM meta WHERE name = ?`,
	},
	ReplicaBatch: mvcc.ReplicaBatchSQL{Rollback: rollbackSQL},
	Regress: mvcc.RegressSQL{
		SetRev:   `UPDATE meta SET value = ? WHERE name IN ('rev', 'compact')`,
		SetReset: `INSERT INTO meta (name, value) VALUES ('reset', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)`,
		// InnoDB's row lock on the UPDATE lockBatchSQL takes: MySQL has no
		// UPDATE ... RETURNING.
		LockRev: `SELECT value FROM meta WHERE name = 'rev' FOR UPDATE`,
	},
	Alarm: mvcc.AlarmSQL{
		List:       `SELECT name, value FROM meta WHERE name LIKE 'alarm/%'`,
		Activate:   `INSERT INTO meta (name, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = value`,
		Deactivate: `DELETE FROM meta WHERE name = ?`,
	},
}

// insertMetaSQL adds a row to meta (Schema's and Import's).
const insertMetaSQL = `INSERT INTO meta (name, value) VALUES (?, ?)`

// changedAt is the rows of the keys of a range that changed after a
// revision, as they were at it (absent if deleted then): only those need
// resolving from the log; every other key's current row is already its
// state at that revision. It scans the log from the revision on, which for
// the revisions kube-apiserver pins (seconds old) is a handful of rows.
// Args: at, at, key range.
func changedAt(k mvcc.KeyShape) string {
	return `SELECT l.key, l.value, l.create_rev, l.rev AS mod_rev, l.version, l.lease
		FROM (SELECT c.key AS k, (SELECT MAX(x.rev) FROM log x WHERE x.key = c.key AND x.rev <= ?) AS r
			FROM (SELECT DISTINCT y.key FROM log AS y FORCE INDEX (log_rev) WHERE y.rev > ? AND ` + generic.KeyCond("y.key", k) + `) c) t
		CROSS JOIN log l
		WHERE l.key = t.k AND l.rev = t.r AND l.deleted = 0`
}

// list is RangeSQL's List (cols liveCols) or Keys (keyCols); changedCols
// are the same columns of changedAt's rows p.
func list(cols, changedCols string) mvcc.ListSQL {
	latest := func(k mvcc.KeyShape) string {
		return `SELECT ` + cols + ` FROM current c WHERE ` + generic.KeyCond("c.key", k) + ` ORDER BY c.key`
	}
	at := func(k mvcc.KeyShape) string {
		return `SELECT ` + cols + ` FROM current c WHERE ` + generic.KeyCond("c.key", k) + ` AND c.mod_rev <= ?
			UNION ALL SELECT ` + changedCols + ` FROM (` + changedAt(k) + `) p ORDER BY 1`
	}
	return mvcc.ListSQL{
		Latest:      generic.Shapes(latest),
		LatestLimit: generic.Shapes(func(k mvcc.KeyShape) string { return latest(k) + ` LIMIT ?` }),
		At:          generic.Shapes(at),
		AtLimit:     generic.Shapes(func(k mvcc.KeyShape) string { return at(k) + ` LIMIT ?` }),
	}
}

// logPage is LogPageSQL's Page through from.
func logPage(from string, k mvcc.KeyShape) string {
	return `SELECT l.rev, l.sub, l.key, COALESCE(octet_length(l.value), 0), CASE WHEN octet_length(l.value) <= ? THEN l.value END,
			l.create_rev, l.version, l.lease, l.deleted, l.unix_ms,
			p.rev, COALESCE(octet_length(p.value), 0), CASE WHEN octet_length(p.value) <= ? THEN p.value END,
			p.create_rev, p.version, p.lease, p.deleted
		FROM ` + from + ` ` + prevJoin + `
		WHERE (l.rev, l.sub) > (?, ?) AND (l.rev, l.sub) <= (?, ?) AND ` + generic.KeyCond("l.key", k) + ` ORDER BY l.rev, l.sub LIMIT ?`
}

// logValues is LogPageSQL's Values through from.
func logValues(from string, k mvcc.KeyShape) string {
	return `SELECT l.rev, l.sub, CASE WHEN octet_length(l.value) > ? THEN l.value END, CASE WHEN octet_length(p.value) > ? THEN p.value END
		FROM ` + from + ` ` + prevJoin + `
		WHERE (l.rev, l.sub) >= (?, ?) AND (l.rev, l.sub) <= (?, ?) AND ` + generic.KeyCond("l.key", k) + ` ORDER BY l.rev, l.sub`
}

// keyHeads is LogPageSQL's KeyHeads in order dir.
func keyHeads(dir string) string {
	return `SELECT l.id, l.rev, l.sub, l.key, COALESCE(octet_length(l.value), 0) FROM ` + logByKey + `
		WHERE l.key = ? AND l.rev >= ? AND l.rev <= ? ORDER BY l.rev` + dir + ` LIMIT ?`
}

// heads is LogPageSQL's Heads through from, in order dir.
func heads(from, dir string, k mvcc.KeyShape) string {
	return `SELECT l.id, l.rev, l.sub, l.key, COALESCE(octet_length(l.value), 0) FROM ` + from + `
		WHERE (l.rev, l.sub) > (?, ?) AND (l.rev, l.sub) < (?, ?) AND ` + generic.KeyCond("l.key", k) + `
		ORDER BY l.rev` + dir + `, l.sub` + dir + ` LIMIT ?`
}

// keysAt is RangeAtSQL's Keys, each next key bounded by end (its ?
// included). A recursive query walks the (key, rev) index from one key to
// the next, so a key's many revisions cost one lookup, not a scan of them.
func keysAt(end string) string {
	return `WITH RECURSIVE walk(n, k) AS (
			SELECT 1, (SELECT x.key FROM log AS x WHERE x.key >= ?` + end + ` ORDER BY x.key LIMIT 1)
			UNION ALL
			SELECT walk.n + 1, (SELECT x.key FROM log AS x WHERE x.key > walk.k` + end + ` ORDER BY x.key LIMIT 1) FROM walk WHERE walk.k IS NOT NULL AND walk.n < ?
		)
		SELECT walk.k, l.id, COALESCE(octet_length(l.value), 0), l.deleted
		FROM walk LEFT JOIN log l ON l.id = (SELECT y.id FROM log AS y WHERE y.key = walk.k AND y.rev <= ? ORDER BY y.rev DESC LIMIT 1)
		WHERE walk.k IS NOT NULL ORDER BY walk.n`
}

// nowMs is the database's clock in Unix milliseconds, whatever the
// session's time zone.
const nowMs = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)`

// Sessions: what each connection runs before the pool uses it
// (sessionSetup, OpenSource), and after a transaction (conn.go).
const (
	// strictModeSQL makes a value too long for its column an error, and
	// keeps every mode that changes how SQL parses off.
	strictModeSQL = `SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO'`
	// readCommittedSQL makes the session's transactions READ COMMITTED.
	readCommittedSQL = `SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`
	// readOnlySQL makes the session's transactions read-only.
	readOnlySQL = `SET SESSION TRANSACTION READ ONLY`
	// releaseLocksSQL releases every named lock the session holds.
	releaseLocksSQL = "DO RELEASE_ALL_LOCKS()"
)

// Transactions the dialect begins and ends itself: a batch's, and the
// one begun again after the schema's DDL (conn.go).
const (
	startTransactionSQL = `START TRANSACTION`
	commitSQL           = `COMMIT`
	rollbackSQL         = `ROLLBACK`
)

// statementTimeoutSQL sets setting, a timeoutVar, for the session.
func statementTimeoutSQL(setting string) string {
	return fmt.Sprintf(`SET SESSION %s`, setting)
}

// The server and its databases (Open, detect).
const (
	// maxPacketSQL is the server's max_allowed_packet.
	maxPacketSQL = `SELECT @@max_allowed_packet`
	// durabilitySQL is the server's settings that make a commit durable.
	durabilitySQL = `SELECT @@log_bin, @@sync_binlog, @@innodb_flush_log_at_trx_commit`
	// versionSQL is the server's version.
	versionSQL = `SELECT VERSION()`
	// databaseExistsSQL counts the databases of a name (0 or 1).
	databaseExistsSQL = `SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?`
)

// createDatabaseSQL creates the database name unless it exists, its
// strings compared as bytes.
func createDatabaseSQL(name string) string {
	return "CREATE DATABASE IF NOT EXISTS `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
}

// The write batch (batch.go).

// lockBatchSQL takes the batch lock: InnoDB locks the row an UPDATE
// matches even when it changes nothing, until the transaction ends, so
// batches of every replica commit one after another, each starting from
// the revision the previous one committed.
const lockBatchSQL = `UPDATE meta SET value = value WHERE name = 'rev'`

// keyListSizes are the lengths of the key lists of the batch's statements
// that read or check its keys (stateSQL, stateKeysSQL, assumedAbsentSQL):
// a list of n keys takes the shortest that holds them, its last key
// repeated to fill it (IN matches a row once), and more keys than the
// longest take several.
var keyListSizes = [...]int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}

// stateMetaSQL reads, after the lock, the committed revision, floors and
// writer's mark (the row with a NULL key; a store whose batches never
// marked one reads 0). The writer's sessions are READ COMMITTED: the
// statement reads what the previous batch committed.
const stateMetaSQL = `SELECT NULL, NULL, (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact'), (SELECT value FROM meta WHERE name = 'last_unix_ms'), COALESCE((SELECT value FROM meta WHERE name = 'last_writer'), 0), 0`

// stateKeysSQL reads the current rows of a list of keys, in stateSQL's
// columns: key, value, 0, create_rev, mod_rev, version, lease.
var stateKeysSQL = keyLists(func(n int) string {
	return `SELECT c.key, ` + liveValue + `, 0, c.create_rev, c.mod_rev, c.version, c.lease FROM current c WHERE c.key IN (` + generic.List(n) + `)`
})

// stateSQL is stateMetaSQL and the current rows of a list of keys, in one
// statement.
var stateSQL = keyLists(func(n int) string {
	return stateMetaSQL + "\nUNION ALL " + stateKeysSQL[listIndex(n)]
})

// lockStateSQL takes the lock and reads the state (of no key, or a list of
// keys), in one multi-statement query; beginLockStateSQL begins the
// transaction first.
var (
	lockStateMetaSQL      = lockBatchSQL + ";\n" + stateMetaSQL
	lockStateSQL          = keyLists(func(n int) string { return lockBatchSQL + ";\n" + stateSQL[listIndex(n)] })
	beginLockStateMetaSQL = startTransactionSQL + ";\n" + lockStateMetaSQL
	beginLockStateSQL     = keyLists(func(n int) string { return startTransactionSQL + ";\n" + lockStateSQL[listIndex(n)] })
)

// keyLists is the statement write gives for each of keyListSizes.
func keyLists(write func(n int) string) (out [len(keyListSizes)]string) {
	for i, n := range keyListSizes {
		out[i] = write(n)
	}
	return out
}

// listIndex is the index in keyListSizes of the shortest list that holds
// n keys, or of the longest.
func listIndex(n int) int {
	for i, size := range keyListSizes {
		if size >= n {
			return i
		}
	}
	return len(keyListSizes) - 1
}
