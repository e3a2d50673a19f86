package sqlite

// Every statement the dialect runs, by area: first the engine's
// (mvcc.Statements, ADR-039), each written out here in SQLite's syntax and
// prepared once when a store opens, then the dialect's own. The schema is
// Migrations' (sqlite.go); the connections' settings are the DSN's pragmas
// (dsn). A query with several shapes (one key or a range, keys only, a
// limit) is one statement per shape, all written when the package is
// initialized: nothing is built per request.

import (
	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Statements is the engine's SQL in SQLite's syntax (mvcc.Dialect).
func (d *Dialect) Statements() *mvcc.Statements { return &statements }

// The log's two indexes, pinned where SQLite's planner would pick the
// other: for SELECT DISTINCT key it prefers a scan of the covering
// (key, rev) index, which reads every revision ever kept (logByRev);
// ordered by revision, it prefers log_rev, which reads the whole log for a
// range that holds little of it (logByKey).
const (
	logByRev = `log AS l INDEXED BY log_rev`
	logByKey = `log AS l INDEXED BY log_key_rev`
)

// A live key's value is in its latest change's log row, (key, mod_rev),
// which the log_key_rev index finds: current holds no value of its own, so
// each value is stored once (ADR-014). liveValue reads it for current's row
// c as a correlated subquery, not a join: each row is then one index seek,
// and the plan over current, its order included, stays as it was.
// liveCols are CurrentSQL's columns, and keyCols the same without the
// value.
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
		InsertMeta:        `INSERT INTO meta (name, value) VALUES (?, ?)`,
		InsertVersion:     `INSERT INTO meta (name, value) VALUES ('schema', ?)`,
		SetVersion:        `UPDATE meta SET value = ? WHERE name = 'schema'`,
		State:             `SELECT name, value FROM meta`,
		Leases:            `SELECT id, ttl FROM leases`,
		FirstWithoutValue: `SELECT c.key FROM current c WHERE NOT EXISTS (SELECT 1 FROM log l WHERE l.key = c.key AND l.rev = c.mod_rev) ORDER BY c.key LIMIT 1`,
		CountWithoutValue: `SELECT COUNT(*) FROM current c WHERE NOT EXISTS (SELECT 1 FROM log l WHERE l.key = c.key AND l.rev = c.mod_rev)`,
	},
	Meta: mvcc.MetaSQL{
		Rev:        revSQL,
		RevCompact: `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact')`,
		RevFloor:   `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT MAX(value) FROM meta WHERE name IN ('compact', 'retain_floor'))`,
		LogFloor:   `SELECT MAX(value) FROM meta WHERE name IN ('retain_floor', 'reset')`,
	},
	Batch: mvcc.BatchSQL{
		Start:         `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact'), (SELECT value FROM meta WHERE name = 'last_unix_ms')`,
		SetRev:        setRevSQL,
		SetLastUnixMs: setLastUnixMsSQL,
		SetCompact:    `UPDATE meta SET value = ? WHERE name = 'compact'`,
		InsertPut:     insertPutSQL,
		InsertDelete:  `INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, ?, NULL, 0, 0, 0, 1, ?)`,
		UpsertCurrent: `INSERT INTO current (key, create_rev, mod_rev, version, lease) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET create_rev = excluded.create_rev, mod_rev = excluded.mod_rev, version = excluded.version, lease = excluded.lease`,
		DeleteCurrent: `DELETE FROM current WHERE key = ?`,
		// OR FAIL spares SQLite the statement journal it keeps for an
		// INSERT ... SELECT, to undo that statement alone if a constraint
		// stops it midway: a batch whose statement fails is rolled back
		// whole (writer.transact), so the journal was never needed, and
		// writing it was 14% of the range delete's CPU in
		// BenchmarkDeleteRange20k.
		InsertDeletes: `INSERT OR FAIL INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms)
			SELECT ?, ? + row_number() OVER (ORDER BY key) - 1, key, NULL, 0, 0, 0, 1, ? FROM current WHERE key >= ? AND key <= ? ORDER BY key`,
		DeleteCurrents: `DELETE FROM current WHERE key >= ? AND key <= ?`,
		Prefetch: func() (qs [3]string) {
			for i, n := range mvcc.PrefetchSizes {
				qs[i] = `SELECT ` + liveCols + ` FROM current c WHERE c.key IN (` + generic.List(n) + `)`
			}
			return qs
		}(),
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
		Keys:   `SELECT key FROM current WHERE lease = ? ORDER BY key`,
		Exists: `SELECT 1 FROM leases WHERE id = ?`,
		Insert: insertLeaseSQL,
		Delete: `DELETE FROM leases WHERE id = ?`,
	},
	Range: mvcc.RangeSQL{
		// One statement reads one snapshot: the revision comes from meta
		// in the same SELECT, and no transaction is needed. (Ranges of
		// many keys stay on the other path: joined this way, SQLite sorts
		// them again instead of reading the index in order.)
		Latest:     `SELECT m.rev, ` + liveCols + ` FROM (SELECT (SELECT value FROM meta WHERE name = 'rev') AS rev) m LEFT JOIN current c ON c.key = ?`,
		LatestKeys: `SELECT m.rev, ` + keyCols + ` FROM (SELECT (SELECT value FROM meta WHERE name = 'rev') AS rev) m LEFT JOIN current c ON c.key = ?`,
		Count: generic.Shapes(func(k mvcc.KeyShape) string {
			return `SELECT COUNT(*) FROM current WHERE ` + generic.KeyCond("key", k)
		}),
		CountAt: generic.Shapes(func(k mvcc.KeyShape) string {
			return `SELECT (SELECT COUNT(*) FROM current WHERE ` + generic.KeyCond("key", k) + ` AND mod_rev <= ?) + (SELECT COUNT(*) FROM (` + changedAt(k) + `) p)`
		}),
		List: list(liveCols, `key, value, create_rev, mod_rev, version, lease`),
		Keys: list(keyCols, `key, NULL, create_rev, mod_rev, version, lease`),
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
		KeyAsOf:       `SELECT rev, value, create_rev, version, lease, deleted FROM log WHERE key = ? AND rev <= ? ORDER BY rev DESC LIMIT 1`,
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
		Cursor:      `SELECT cursor, floor FROM retention WHERE prefix = ?`,
		InsertRule:  `INSERT INTO retention (prefix, floor, floor_unix_ms, cursor) VALUES (?, 0, 0, 0)`,
		Rows:        `SELECT id, key, rev, deleted FROM log WHERE id > ? AND id <= ? ORDER BY id LIMIT ?`,
		DeleteBelow: `DELETE FROM log WHERE key = ? AND rev < ?`,
		DeleteRow:   `DELETE FROM log WHERE id = ?`,
		SetRule:     `UPDATE retention SET floor = ?, floor_unix_ms = ?, cursor = ? WHERE prefix = ?`,
		SetFloor:    `UPDATE meta SET value = ? WHERE name = 'retain_floor' AND value < ?`,
		Imported:    `SELECT (SELECT value FROM meta WHERE name = 'imported_rev'), (SELECT value FROM meta WHERE name = 'imported_unix_ms')`,
		RetainFloor: `SELECT value FROM meta WHERE name = 'retain_floor'`,
		Floors:      `SELECT prefix, floor, floor_unix_ms FROM retention`,
	},
	Budget: mvcc.BudgetSQL{
		History: `SELECT rev, key, octet_length(key) + COALESCE(octet_length(value), 0), version, deleted
			FROM log WHERE rev > ? AND rev <= ? ORDER BY rev, sub`,
	},
	Usage: mvcc.UsageSQL{
		// One pass over the (key, rev) index, sizes summed, no value read.
		Usage: `SELECT key, COUNT(*), SUM(octet_length(key) + COALESCE(octet_length(value), 0)),
				SUM(CASE WHEN unix_ms >= ? THEN 1 ELSE 0 END), MIN(unix_ms), MAX(unix_ms)
			FROM ` + logByKey + ` GROUP BY key ORDER BY key`,
	},
	Import: mvcc.ImportSQL{
		Size:           `SELECT (SELECT COUNT(*) FROM current), (SELECT COUNT(*) FROM log), (SELECT COUNT(*) FROM leases), (SELECT COUNT(*) FROM meta WHERE name = 'imported_rev')`,
		InsertPut:      insertPutSQL,
		InsertCurrent:  `INSERT INTO current (key, create_rev, mod_rev, version, lease) VALUES (?, ?, ?, ?, ?)`,
		SetRev:         setRevSQL,
		SetLastUnixMs:  setLastUnixMsSQL,
		SetRetainFloor: `UPDATE meta SET value = ? WHERE name = 'retain_floor'`,
		InsertMeta:     `INSERT INTO meta (name, value) VALUES (?, ?)`,
		DeleteMeta:     `DELETE FROM meta WHERE name = ?`,
	},
	Regress: mvcc.RegressSQL{
		SetRev:   `UPDATE meta SET value = ? WHERE name IN ('rev', 'compact')`,
		SetReset: `INSERT INTO meta (name, value) VALUES ('reset', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
	},
	Alarm: mvcc.AlarmSQL{
		List:       `SELECT name, value FROM meta WHERE name LIKE 'alarm/%'`,
		Activate:   `INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`,
		Deactivate: `DELETE FROM meta WHERE name = ?`,
	},
}

// Statements more than one area runs.
const (
	setRevSQL        = `UPDATE meta SET value = ? WHERE name = 'rev'`
	setLastUnixMsSQL = `UPDATE meta SET value = ? WHERE name = 'last_unix_ms'`
	insertPutSQL     = `INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)`
	insertLeaseSQL   = `INSERT INTO leases (id, ttl) VALUES (?, ?)`
)

// changedAt is the rows of the keys of a range that changed after a
// revision, as they were at it (absent if deleted then): only those need
// resolving from the log; every other key's current row is already its
// state at that revision. It scans the log from the revision on, which for
// the revisions kube-apiserver pins (seconds old) is a handful of rows.
// CROSS JOIN keeps SQLite's join order: the few changed keys drive the
// lookups, never a scan of the log. Args: at, at, key range.
func changedAt(k mvcc.KeyShape) string {
	return `SELECT l.key AS key, l.value AS value, l.create_rev AS create_rev, l.rev AS mod_rev, l.version AS version, l.lease AS lease
		FROM (SELECT c.key AS k, (SELECT MAX(x.rev) FROM log x WHERE x.key = c.key AND x.rev <= ?) AS r
			FROM (SELECT DISTINCT y.key FROM log AS y INDEXED BY log_rev WHERE y.rev > ? AND ` + generic.KeyCond("y.key", k) + `) c) t
		CROSS JOIN log l
		WHERE l.key = t.k AND l.rev = t.r AND l.deleted = 0`
}

// list is RangeSQL's List (cols liveCols) or Keys (keyCols); changedCols
// are the same columns of changedAt's rows.
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
	return `WITH RECURSIVE k(n, key) AS (
			SELECT 1, (SELECT x.key FROM log AS x WHERE x.key >= ?` + end + ` ORDER BY x.key LIMIT 1)
			UNION ALL
			SELECT k.n + 1, (SELECT x.key FROM log AS x WHERE x.key > k.key` + end + ` ORDER BY x.key LIMIT 1) FROM k WHERE k.key IS NOT NULL AND k.n < ?
		)
		SELECT k.key, l.id, COALESCE(octet_length(l.value), 0), l.deleted
		FROM k LEFT JOIN log l ON l.id = (SELECT y.id FROM log AS y WHERE y.key = k.key AND y.rev <= ? ORDER BY y.rev DESC LIMIT 1)
		WHERE k.key IS NOT NULL ORDER BY k.n`
}

// Checkpoints (mvcc.Checkpointer).

// checkpointSQL copies to the database what no reader still needs from
// the WAL, waiting for no lock.
const checkpointSQL = "PRAGMA wal_checkpoint(PASSIVE)"

// autoCheckpointOnSQL sets the connection's wal_autocheckpoint to
// SQLite's default, 1,000 pages; autoCheckpointOffSQL turns it off.
const (
	autoCheckpointOnSQL  = "PRAGMA wal_autocheckpoint = 1000"
	autoCheckpointOffSQL = "PRAGMA wal_autocheckpoint = 0"
)

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
	// revSQL is the store's revision (MetaSQL.Rev too).
	revSQL = `SELECT value FROM meta WHERE name = 'rev'`
	// checkpointTruncateSQL copies the whole WAL into the database and
	// empties it.
	checkpointTruncateSQL = `PRAGMA wal_checkpoint(TRUNCATE)`
	// dropLineageSQL forgets the replication lineage (ADR-044) of a
	// restored copy: its history is not the one its replica goes on from.
	dropLineageSQL = `DELETE FROM meta WHERE name = 'lineage'`
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
