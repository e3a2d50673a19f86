package postgres

// Every statement the dialect runs, by area: first the engine's
// (mvcc.Statements, ADR-039), each written out here in PostgreSQL's syntax
// and prepared once when a store opens (pgx prepares the rest once per
// connection); the dialect's own are in sql_batch.go. A query with several shapes (one
// key or a range, keys only, a limit) is one statement per shape, all
// written when the package is initialized, their placeholders numbered as
// they are written (params): nothing is built per request. The schema is
// Migrations' (postgres.go).

import (
	"strconv"
	"strings"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Statements is the engine's SQL in PostgreSQL's syntax (mvcc.Dialect).
func (d *Dialect) Statements() *mvcc.Statements { return &statements }

// params numbers a statement's placeholders as it is written, in the
// order of its arguments: next is the next $n, keys a key range's
// condition.
type params struct{ n int }

func (p *params) next() string {
	p.n++
	return "$" + strconv.Itoa(p.n)
}

// keys is a key range's condition on col: its arguments are the range's
// key, and end for mvcc.KeyBetween.
func (p *params) keys(col string, k mvcc.KeyShape) string {
	switch k {
	case mvcc.OneKey:
		return col + " = " + p.next()
	case mvcc.FromKey:
		return col + " >= " + p.next()
	}
	from := p.next()
	return col + " >= " + from + " AND " + col + " < " + p.next()
}

// list is n placeholders from p, separated by commas.
func (p *params) list(n int) string {
	var b strings.Builder
	b.Grow(n * 7)
	b.WriteString(p.next())
	for range n - 1 {
		b.WriteString(", ")
		b.WriteString(p.next())
	}
	return b.String()
}

// A live key's value is in its latest change's log row, (key, mod_rev),
// which the log_key_rev index finds: current holds no value of its own, so
// each value is stored once (ADR-014). liveValue reads it for current's row
// c as a correlated subquery, not a join: each row is then one index seek,
// where the planner would choose a hash join over a scan of the whole log
// for a long range. liveCols are CurrentSQL's columns, keyCols the same
// without the value.
const (
	liveValue = `(SELECT l.value FROM log l WHERE l.key = c.key AND l.rev = c.mod_rev)`
	liveCols  = `c.key, ` + liveValue + `, c.create_rev, c.mod_rev, c.version, c.lease`
	keyCols   = `c.key, NULL, c.create_rev, c.mod_rev, c.version, c.lease`
)

// prevJoin joins each log row l to its prev_kv's row p: the key's row just
// before it.
const prevJoin = `LEFT JOIN log p ON p.id = (SELECT x.id FROM log AS x WHERE x.key = l.key AND x.rev < l.rev ORDER BY x.rev DESC LIMIT 1)`

// The log is read through whichever index the planner picks: it weighs a
// revision condition against the key range from statistics (and the actual
// index bounds for revisions newer than the histogram), so the statements
// that SQLite and MySQL pin to an index name none.
var statements = mvcc.Statements{
	Schema: mvcc.SchemaSQL{
		CreateMeta:        `CREATE TABLE IF NOT EXISTS meta (name VARCHAR(64) NOT NULL PRIMARY KEY, value BIGINT NOT NULL)`,
		Version:           `SELECT value FROM meta WHERE name = 'schema'`,
		InsertMeta:        insertMetaSQL,
		InsertVersion:     `INSERT INTO meta (name, value) VALUES ('schema', $1)`,
		SetVersion:        `UPDATE meta SET value = $1 WHERE name = 'schema'`,
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
		Get: `SELECT ` + liveValue + `, c.create_rev, c.mod_rev, c.version, c.lease FROM current c WHERE c.key = $1`,
		Range: generic.Shapes(func(k mvcc.KeyShape) string {
			var p params
			return `SELECT ` + liveCols + ` FROM current c WHERE ` + p.keys("c.key", k) + ` ORDER BY c.key`
		}),
		ByLease: `SELECT ` + liveCols + ` FROM current c WHERE c.lease = $1 ORDER BY c.key`,
		All:     `SELECT ` + liveCols + ` FROM current c ORDER BY c.key`,
	},
	Lease: mvcc.LeaseSQL{
		Keys:   `SELECT key FROM current WHERE lease = $1 ORDER BY key`,
		Exists: `SELECT 1 FROM leases WHERE id = $1`,
		Insert: insertLeaseSQL,
		Delete: `DELETE FROM leases WHERE id = $1`,
	},
	Range: mvcc.RangeSQL{
		// One statement reads one snapshot: the revision comes from meta
		// in the same SELECT, and no transaction is needed.
		Latest:     `SELECT m.rev, ` + liveCols + ` FROM (SELECT (SELECT value FROM meta WHERE name = 'rev') AS rev) m LEFT JOIN current c ON c.key = $1`,
		LatestKeys: `SELECT m.rev, ` + keyCols + ` FROM (SELECT (SELECT value FROM meta WHERE name = 'rev') AS rev) m LEFT JOIN current c ON c.key = $1`,
		Count: generic.Shapes(func(k mvcc.KeyShape) string {
			var p params
			return `SELECT COUNT(*) FROM current WHERE ` + p.keys("key", k)
		}),
		CountAt: generic.Shapes(func(k mvcc.KeyShape) string {
			var p params
			live := `SELECT COUNT(*) FROM current WHERE ` + p.keys("key", k) + ` AND mod_rev <= ` + p.next()
			return `SELECT (` + live + `) + (SELECT COUNT(*) FROM (` + changedAt(&p, k) + `) p)`
		}),
		List: list(liveCols, `key, value, create_rev, mod_rev, version, lease`),
		Keys: list(keyCols, `key, NULL, create_rev, mod_rev, version, lease`),
	},
	Watch: mvcc.WatchSQL{
		Events: generic.Shapes(func(k mvcc.KeyShape) string {
			var p params
			where := `l.rev >= ` + p.next() + ` AND l.rev <= ` + p.next() + ` AND ` + p.keys("l.key", k)
			return `SELECT l.rev, l.sub, l.key, l.value, l.create_rev, l.version, l.lease, l.deleted, l.unix_ms,
					p.rev, p.value, p.create_rev, p.version, p.lease, p.deleted
				FROM log AS l ` + prevJoin + `
				WHERE ` + where + ` ORDER BY l.rev, l.sub`
		}),
	},
	History: mvcc.HistorySQL{
		LogStart:  `SELECT MIN(unix_ms) FROM log`,
		RevAtTime: `SELECT rev FROM log WHERE unix_ms <= $1 ORDER BY unix_ms DESC, rev DESC LIMIT 1`,
		KeyAtTime: `SELECT t.rev, l.rev, l.value, l.create_rev, l.version, l.lease, l.deleted
			FROM (SELECT (SELECT rev FROM log WHERE unix_ms <= $1 ORDER BY unix_ms DESC, rev DESC LIMIT 1) AS rev) t
			LEFT JOIN log l ON l.id = (SELECT x.id FROM log x WHERE x.key = $2 AND x.rev <= t.rev ORDER BY x.rev DESC LIMIT 1)`,
		RevFromTime:   `SELECT rev FROM log WHERE unix_ms >= $1 ORDER BY unix_ms, rev LIMIT 1`,
		RevBeforeTime: `SELECT rev FROM log WHERE unix_ms < $1 ORDER BY unix_ms DESC, rev DESC LIMIT 1`,
		KeyAsOf:       `SELECT rev, value, create_rev, version, lease, deleted FROM log WHERE key = $1 AND rev <= $2 ORDER BY rev DESC LIMIT 1`,
	},
	LogPage: mvcc.LogPageSQL{
		KeyPage: `SELECT l.rev, l.sub, COALESCE(octet_length(l.value), 0), CASE WHEN octet_length(l.value) <= $1 THEN l.value END,
				l.create_rev, l.version, l.lease, l.deleted, l.unix_ms
			FROM log AS l
			WHERE l.key = $2 AND l.rev >= COALESCE((SELECT x.rev FROM log AS x WHERE x.key = $3 AND x.rev < $4 ORDER BY x.rev DESC LIMIT 1), 0)
			ORDER BY l.rev LIMIT $5`,
		KeyValues: `SELECT l.rev, l.value FROM log AS l
			WHERE l.key = $1 AND l.rev >= $2 AND l.rev <= $3 AND octet_length(l.value) > $4 ORDER BY l.rev`,
		Narrow: generic.Spans(func(k mvcc.KeyShape) string {
			var p params
			return `SELECT COUNT(*) FROM (SELECT 1 FROM log AS l WHERE ` + p.keys("l.key", k) + ` LIMIT ` + p.next() + `) AS t`
		}),
		// The planner picks the index for both: the two forms are the
		// same statement.
		Page:           generic.Spans(logPage),
		PageByKey:      generic.Spans(logPage),
		Window:         `SELECT l.rev, l.sub FROM log AS l WHERE (l.rev, l.sub) > ($1, $2) ORDER BY l.rev, l.sub LIMIT 1 OFFSET $3`,
		WindowDesc:     `SELECT l.rev, l.sub FROM log AS l WHERE (l.rev, l.sub) < ($1, $2) ORDER BY l.rev DESC, l.sub DESC LIMIT 1 OFFSET $3`,
		Values:         generic.Spans(logValues),
		ValuesByKey:    generic.Spans(logValues),
		KeyHeads:       keyHeads(""),
		KeyHeadsDesc:   keyHeads(" DESC"),
		Heads:          generic.Spans(func(k mvcc.KeyShape) string { return heads("", k) }),
		HeadsDesc:      generic.Spans(func(k mvcc.KeyShape) string { return heads(" DESC", k) }),
		HeadsByKey:     generic.Spans(func(k mvcc.KeyShape) string { return heads("", k) }),
		HeadsByKeyDesc: generic.Spans(func(k mvcc.KeyShape) string { return heads(" DESC", k) }),
		PrevHeads: generic.IDLists(func(n int) string {
			var p params
			return `SELECT l.id, l.deleted, p.id, COALESCE(octet_length(p.value), 0), p.deleted FROM log l ` + prevJoin + `
				WHERE l.id IN (` + p.list(n) + `)`
		}),
		Entries: generic.IDLists(func(n int) string {
			var p params
			return `SELECT id, rev, value, create_rev, version, lease, deleted, unix_ms FROM log WHERE id IN (` + p.list(n) + `)`
		}),
	},
	RangeAt: mvcc.RangeAtSQL{
		Keys: mvcc.Spans{From: keysAt(false), Between: keysAt(true)},
		Values: generic.IDLists(func(n int) string {
			var p params
			return `SELECT id, rev, value, create_rev, version, lease FROM log WHERE id IN (` + p.list(n) + `)`
		}),
	},
	Retention: mvcc.RetentionSQL{
		Floor:       `SELECT floor, floor_unix_ms FROM retention WHERE prefix = $1`,
		AtTime:      `SELECT rev, unix_ms FROM log WHERE unix_ms <= $1 ORDER BY unix_ms DESC, rev DESC LIMIT 1`,
		AtRev:       `SELECT rev, unix_ms FROM log WHERE rev >= $1 ORDER BY rev LIMIT 1`,
		LastBelow:   `SELECT id FROM log WHERE rev < $1 ORDER BY rev DESC, sub DESC LIMIT 1`,
		Cursor:      `SELECT cursor, floor FROM retention WHERE prefix = $1`,
		InsertRule:  `INSERT INTO retention (prefix, floor, floor_unix_ms, cursor) VALUES ($1, 0, 0, 0)`,
		Rows:        `SELECT id, key, rev, deleted FROM log WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`,
		DeleteBelow: `DELETE FROM log WHERE key = $1 AND rev < $2`,
		DeleteRow:   `DELETE FROM log WHERE id = $1`,
		SetRule:     `UPDATE retention SET floor = $1, floor_unix_ms = $2, cursor = $3 WHERE prefix = $4`,
		SetFloor:    `UPDATE meta SET value = $1 WHERE name = 'retain_floor' AND value < $2`,
		Imported:    `SELECT (SELECT value FROM meta WHERE name = 'imported_rev'), (SELECT value FROM meta WHERE name = 'imported_unix_ms')`,
		RetainFloor: `SELECT value FROM meta WHERE name = 'retain_floor'`,
		Floors:      `SELECT prefix, floor, floor_unix_ms FROM retention`,
	},
	Budget: mvcc.BudgetSQL{
		History: `SELECT rev, key, octet_length(key) + COALESCE(octet_length(value), 0), version, deleted
			FROM log WHERE rev > $1 AND rev <= $2 ORDER BY rev, sub`,
	},
	Usage: mvcc.UsageSQL{
		Usage: `SELECT key, COUNT(*), SUM(octet_length(key) + COALESCE(octet_length(value), 0)),
				SUM(CASE WHEN unix_ms >= $1 THEN 1 ELSE 0 END), MIN(unix_ms), MAX(unix_ms)
			FROM log AS l GROUP BY key ORDER BY key`,
	},
	// An import's rows and revision go through WriteBatch (batch.go).
	Import: mvcc.ImportSQL{
		Size:           `SELECT (SELECT COUNT(*) FROM current), (SELECT COUNT(*) FROM log), (SELECT COUNT(*) FROM leases), (SELECT COUNT(*) FROM meta WHERE name = 'imported_rev')`,
		SetRetainFloor: `UPDATE meta SET value = $1 WHERE name = 'retain_floor'`,
		InsertMeta:     insertMetaSQL,
		DeleteMeta:     `DELETE FROM meta WHERE name = $1`,
	},
	ReplicaBatch: mvcc.ReplicaBatchSQL{Rollback: rollbackSQL},
	Regress: mvcc.RegressSQL{
		SetRev:   `UPDATE meta SET value = $1 WHERE name IN ('rev', 'compact')`,
		SetReset: `INSERT INTO meta (name, value) VALUES ('reset', $1) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
		LockRev:  lockBatchSQL,
	},
	Alarm: mvcc.AlarmSQL{
		List:       `SELECT name, value FROM meta WHERE name LIKE 'alarm/%'`,
		Activate:   `INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
		Deactivate: `DELETE FROM meta WHERE name = $1`,
	},
}

// Statements more than one area runs.
const (
	insertMetaSQL  = `INSERT INTO meta (name, value) VALUES ($1, $2)`
	insertLeaseSQL = `INSERT INTO leases (id, ttl) VALUES ($1, $2)`
)

// changedAt is the rows of the keys of a range that changed after a
// revision, as they were at it (absent if deleted then): only those need
// resolving from the log; every other key's current row is already its
// state at that revision. It scans the log from the revision on, which for
// the revisions kube-apiserver pins (seconds old) is a handful of rows.
// Its arguments, from p: at, at, key range.
func changedAt(p *params, k mvcc.KeyShape) string {
	at := p.next()
	after := p.next()
	return `SELECT l.key AS key, l.value AS value, l.create_rev AS create_rev, l.rev AS mod_rev, l.version AS version, l.lease AS lease
		FROM (SELECT c.key AS k, (SELECT MAX(x.rev) FROM log x WHERE x.key = c.key AND x.rev <= ` + at + `) AS r
			FROM (SELECT DISTINCT y.key FROM log AS y WHERE y.rev > ` + after + ` AND ` + p.keys("y.key", k) + `) c) t
		CROSS JOIN log l
		WHERE l.key = t.k AND l.rev = t.r AND l.deleted = 0`
}

// list is RangeSQL's List (cols liveCols) or Keys (keyCols); changedCols
// are the same columns of changedAt's rows.
func list(cols, changedCols string) mvcc.ListSQL {
	latest := func(p *params, k mvcc.KeyShape) string {
		return `SELECT ` + cols + ` FROM current c WHERE ` + p.keys("c.key", k) + ` ORDER BY c.key`
	}
	at := func(p *params, k mvcc.KeyShape) string {
		live := `SELECT ` + cols + ` FROM current c WHERE ` + p.keys("c.key", k) + ` AND c.mod_rev <= ` + p.next()
		return live + ` UNION ALL SELECT ` + changedCols + ` FROM (` + changedAt(p, k) + `) p ORDER BY 1`
	}
	limited := func(q func(*params, mvcc.KeyShape) string) func(mvcc.KeyShape) string {
		return func(k mvcc.KeyShape) string {
			var p params
			body := q(&p, k)
			return body + ` LIMIT ` + p.next()
		}
	}
	all := func(q func(*params, mvcc.KeyShape) string) func(mvcc.KeyShape) string {
		return func(k mvcc.KeyShape) string {
			var p params
			return q(&p, k)
		}
	}
	return mvcc.ListSQL{
		Latest:      generic.Shapes(all(latest)),
		LatestLimit: generic.Shapes(limited(latest)),
		At:          generic.Shapes(all(at)),
		AtLimit:     generic.Shapes(limited(at)),
	}
}

// logPage is LogPageSQL's Page.
func logPage(k mvcc.KeyShape) string {
	var p params
	inline, prevInline := p.next(), p.next()
	where := `(l.rev, l.sub) > (` + p.next() + `, ` + p.next() + `) AND (l.rev, l.sub) <= (` + p.next() + `, ` + p.next() + `) AND ` + p.keys("l.key", k)
	return `SELECT l.rev, l.sub, l.key, COALESCE(octet_length(l.value), 0), CASE WHEN octet_length(l.value) <= ` + inline + ` THEN l.value END,
			l.create_rev, l.version, l.lease, l.deleted, l.unix_ms,
			p.rev, COALESCE(octet_length(p.value), 0), CASE WHEN octet_length(p.value) <= ` + prevInline + ` THEN p.value END,
			p.create_rev, p.version, p.lease, p.deleted
		FROM log AS l ` + prevJoin + `
		WHERE ` + where + ` ORDER BY l.rev, l.sub LIMIT ` + p.next()
}

// logValues is LogPageSQL's Values.
func logValues(k mvcc.KeyShape) string {
	var p params
	inline, prevInline := p.next(), p.next()
	where := `(l.rev, l.sub) >= (` + p.next() + `, ` + p.next() + `) AND (l.rev, l.sub) <= (` + p.next() + `, ` + p.next() + `) AND ` + p.keys("l.key", k)
	return `SELECT l.rev, l.sub, CASE WHEN octet_length(l.value) > ` + inline + ` THEN l.value END, CASE WHEN octet_length(p.value) > ` + prevInline + ` THEN p.value END
		FROM log AS l ` + prevJoin + `
		WHERE ` + where + ` ORDER BY l.rev, l.sub`
}

// keyHeads is LogPageSQL's KeyHeads in order dir.
func keyHeads(dir string) string {
	return `SELECT l.id, l.rev, l.sub, l.key, COALESCE(octet_length(l.value), 0) FROM log AS l
		WHERE l.key = $1 AND l.rev >= $2 AND l.rev <= $3 ORDER BY l.rev` + dir + ` LIMIT $4`
}

// heads is LogPageSQL's Heads in order dir.
func heads(dir string, k mvcc.KeyShape) string {
	var p params
	where := `(l.rev, l.sub) > (` + p.next() + `, ` + p.next() + `) AND (l.rev, l.sub) < (` + p.next() + `, ` + p.next() + `) AND ` + p.keys("l.key", k)
	return `SELECT l.id, l.rev, l.sub, l.key, COALESCE(octet_length(l.value), 0) FROM log AS l
		WHERE ` + where + `
		ORDER BY l.rev` + dir + `, l.sub` + dir + ` LIMIT ` + p.next()
}

// keysAt is RangeAtSQL's Keys, each next key bounded by an end when
// bounded. A recursive query walks the (key, rev) index from one key to
// the next, so a key's many revisions cost one lookup, not a scan of them.
func keysAt(bounded bool) string {
	var p params
	from := p.next()
	end, nextEnd := "", ""
	if bounded {
		end, nextEnd = ` AND x.key < `+p.next(), ` AND x.key < `+p.next()
	}
	n, at := p.next(), p.next()
	return `WITH RECURSIVE k(n, key) AS (
			SELECT 1, (SELECT x.key FROM log AS x WHERE x.key >= ` + from + end + ` ORDER BY x.key LIMIT 1)
			UNION ALL
			SELECT k.n + 1, (SELECT x.key FROM log AS x WHERE x.key > k.key` + nextEnd + ` ORDER BY x.key LIMIT 1) FROM k WHERE k.key IS NOT NULL AND k.n < ` + n + `
		)
		SELECT k.key, l.id, COALESCE(octet_length(l.value), 0), l.deleted
		FROM k LEFT JOIN log l ON l.id = (SELECT y.id FROM log AS y WHERE y.key = k.key AND y.rev <= ` + at + ` ORDER BY y.rev DESC LIMIT 1)
		WHERE k.key IS NOT NULL ORDER BY k.n`
}

// nowMs is the database's clock in Unix milliseconds.
const nowMs = `(floor(extract(epoch FROM clock_timestamp()) * 1000))::BIGINT`
