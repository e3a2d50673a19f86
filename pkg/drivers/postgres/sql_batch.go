package postgres

// The dialect's own statements, by what runs them: the write batch
// (batch.go) and transactions behind a pooler (pooler.go). The engine's
// statements are in sql.go.

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
)

// The write batch (batch.go).

// lockBatchSQL takes the batch lock and reads the committed revision.
const lockBatchSQL = `UPDATE meta SET value = value WHERE name = 'rev' RETURNING value`

// lockedStateSQL runs after lockBatchSQL, as a statement of its own: in
// READ COMMITTED its snapshot is taken after the lock, so the floors and
// rows it reads are what the previous batch (of any replica) committed.
// The row with a NULL key carries meta.
const lockedStateSQL = `SELECT NULL::bytea, NULL::bytea,
	(SELECT value FROM meta WHERE name = 'compact'), (SELECT value FROM meta WHERE name = 'last_unix_ms'), 0::bigint, 0::bigint
UNION ALL
SELECT c.key, (SELECT l.value FROM log l WHERE l.key = c.key AND l.rev = c.mod_rev), c.create_rev, c.mod_rev, c.version, c.lease
FROM current c WHERE c.key = ANY($1::bytea[])`

// writeBatchSQL is a whole batch's writes as one statement: the log rows,
// the final state of each changed current row, meta and the notification.
// Its parts run on one snapshot and touch disjoint rows (a key is either
// put or deleted), so their order does not matter. The text never changes,
// so pgx prepares it once per connection.
//
// With $21 true every part is guarded by a check that the database holds
// what the batch assumed (mvcc.Assumption: meta as it expects, and each
// named key at the mod_revision it read, 0 for absent): if not, the
// statement writes nothing. It answers whether it applied, and whether
// meta held.
const writeBatchSQL = `WITH
held AS (
	SELECT (SELECT value FROM meta WHERE name = 'rev') = $22::bigint
		AND (SELECT value FROM meta WHERE name = 'compact') = $23::bigint
		AND (SELECT value FROM meta WHERE name = 'last_unix_ms') = $24::bigint AS meta,
		NOT EXISTS (SELECT 1 FROM unnest($25::bytea[], $26::bigint[]) AS a(k, m)
			LEFT JOIN current c ON c.key = a.k WHERE coalesce(c.mod_rev, 0) <> a.m) AS rows
),
ok AS (
	SELECT NOT $21::boolean OR (meta AND rows) AS ok, NOT $21::boolean OR meta AS meta FROM held
),
l AS (
	INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms)
	SELECT r, s, k, v, c, ver, ls, del, $1::bigint
	FROM unnest($2::bigint[], $3::bigint[], $4::bytea[], $5::bytea[], $6::bigint[], $7::bigint[], $8::bigint[], $9::smallint[])
		AS t(r, s, k, v, c, ver, ls, del)
	WHERE (SELECT ok FROM ok)
),
p AS (
	INSERT INTO current (key, create_rev, mod_rev, version, lease)
	SELECT * FROM unnest($10::bytea[], $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[])
	WHERE (SELECT ok FROM ok)
	ON CONFLICT (key) DO UPDATE SET create_rev = excluded.create_rev,
		mod_rev = excluded.mod_rev, version = excluded.version, lease = excluded.lease
),
d AS (
	DELETE FROM current WHERE key = ANY($15::bytea[]) AND (SELECT ok FROM ok)
),
m AS (
	UPDATE meta SET value = CASE name WHEN 'rev' THEN $16::bigint WHEN 'last_unix_ms' THEN $1::bigint ELSE $17::bigint END
	WHERE ((name IN ('rev', 'last_unix_ms') AND $18::boolean) OR (name = 'compact' AND $19::boolean)) AND (SELECT ok FROM ok)
)
SELECT ok.ok, ok.meta FROM ok LEFT JOIN LATERAL (
	SELECT pg_notify('` + channel + `', $20::text) WHERE ok.ok AND $20::text <> ''
) n ON true`

// Transactions behind a pooler (pooler.go).

// backendPIDSQL is the process ID of the backend that runs the statement.
const backendPIDSQL = `SELECT pg_backend_pid()`

// A write batch's transaction, which the dialect begins and ends in its
// pipelines (batch.go); the engine rolls back one that fails
// (mvcc.ReplicaBatchSQL).
const (
	beginSQL    = `BEGIN`
	commitSQL   = `COMMIT`
	rollbackSQL = `ROLLBACK`
)

// begins are the BEGIN statements of the isolation levels a transaction
// may ask for, read-write and read-only.
var begins = map[sql.IsolationLevel]string{
	sql.LevelDefault:        beginSQL,
	sql.LevelReadCommitted:  "BEGIN ISOLATION LEVEL READ COMMITTED",
	sql.LevelRepeatableRead: "BEGIN ISOLATION LEVEL REPEATABLE READ",
	sql.LevelSnapshot:       "BEGIN ISOLATION LEVEL REPEATABLE READ",
	sql.LevelSerializable:   "BEGIN ISOLATION LEVEL SERIALIZABLE",
}

// beginStatements are the statements that begin a transaction with
// everything a session setting would otherwise have given it, by
// isolation level and read-only, written once per pool (openDB): a BEGIN
// and, with a statement timeout of timeoutMs, setLocalTimeoutSQL's, in one
// message.
type beginStatements map[driver.TxOptions]string

func newBeginStatements(timeoutMs int64) beginStatements {
	b := beginStatements{}
	for iso, begin := range begins {
		for _, ro := range []bool{false, true} {
			q := begin
			if ro {
				q += " READ ONLY"
			}
			if timeoutMs > 0 {
				q += "; " + setLocalTimeoutSQL(timeoutMs)
			}
			b[driver.TxOptions{Isolation: driver.IsolationLevel(iso), ReadOnly: ro}] = q
		}
	}
	return b
}

// of is the statement that begins a transaction of opts.
func (b beginStatements) of(opts driver.TxOptions) (string, error) {
	q, ok := b[opts]
	if !ok {
		return "", fmt.Errorf("postgres: unsupported isolation level %v", sql.IsolationLevel(opts.Isolation))
	}
	return q, nil
}

// setLocalTimeoutSQL gives a transaction its statement_timeout, of the
// dialect's StatementTimeout: written when the dialect is made (New).
func setLocalTimeoutSQL(ms int64) string {
	return "SET LOCAL statement_timeout = " + strconv.FormatInt(ms, 10)
}

// Leases, on the database's clock.
const (
	// leasesSQL reads every lease's ID, TTL and the milliseconds it has
	// left.
	leasesSQL = `SELECT id, ttl, renewed_ms + ttl * 1000 - ` + nowMs + ` FROM leases`
	// renewLeaseSQL renews a lease that has not expired and returns its TTL.
	renewLeaseSQL = `UPDATE leases SET renewed_ms = ` + nowMs + ` WHERE id = $1 AND renewed_ms + ttl * 1000 > ` + nowMs + ` RETURNING ttl`
	// leaseExpiredSQL says whether a lease has expired, and locks its row.
	leaseExpiredSQL = `SELECT renewed_ms + ttl * 1000 <= ` + nowMs + ` FROM leases WHERE id = $1 FOR UPDATE`
	// startLeasesSQL renews every lease as of now.
	startLeasesSQL = `UPDATE leases SET renewed_ms = ` + nowMs
)

// The migration's and the import's locks (advisory locks; the serve lock
// is serveLockID).
const (
	// migrateLockSQL waits for the migration lock, held to the
	// transaction's end.
	migrateLockSQL = `SELECT pg_advisory_xact_lock($1)`
	// serveLockSharedSQL takes the serve lock shared for the transaction
	// without waiting, and says whether it got it: false while an import
	// holds it.
	serveLockSharedSQL = `SELECT pg_try_advisory_xact_lock_shared($1)`
	// serveLockImportSQL takes the serve lock exclusively for the
	// transaction without waiting, and says whether it got it.
	serveLockImportSQL = `SELECT pg_try_advisory_xact_lock($1)`
	// serveLockHoldSQL takes the serve lock shared for the session.
	serveLockHoldSQL = `SELECT pg_advisory_lock_shared($1)`
	// hasMetaSQL says whether the table meta exists.
	hasMetaSQL = `SELECT to_regclass('meta') IS NOT NULL`
)

// The servers' rows in meta (serverrow.go).

// serverRowDeleteSQL removes a server's row and its applied revision's.
const serverRowDeleteSQL = `DELETE FROM meta WHERE name IN ($1, $2, $3)`

// serverRowUpsertSQL writes a server's row, expiring serverExpiry from now.
var serverRowUpsertSQL = fmt.Sprintf(`INSERT INTO meta (name, value) VALUES ($1, %s + %d) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`, nowMs, serverExpiry.Milliseconds())

// serverRowsPruneUpsertSQL is serverRowUpsertSQL that first removes the
// rows expired for serverRowsKept, with their applied revisions' rows, as
// one statement. The rows of one statement's CTEs are disjoint: the
// second reads the first's RETURNING, not the table.
var serverRowsPruneUpsertSQL = fmt.Sprintf(`WITH gone AS (DELETE FROM meta WHERE name LIKE '%[1]s%%' AND name NOT LIKE '%[1]s%%/%%' AND value < %[2]s - %[3]d RETURNING name),
	gone_applied AS (DELETE FROM meta WHERE name LIKE '%[1]s%%/%%' AND split_part(name, '/', 2) IN (SELECT split_part(name, '/', 2) FROM gone)) `,
	serverRowPrefix, nowMs, serverRowsKept.Milliseconds()) + serverRowUpsertSQL

// serverAppliedUpsertSQL records the revision a server has applied ($2)
// in its row $1 and when, on the database's clock, in its row $3.
var serverAppliedUpsertSQL = fmt.Sprintf(`INSERT INTO meta (name, value) VALUES ($1, $2::BIGINT), ($3, %s) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`, nowMs)

// serverRowsLiveSQL counts the servers whose rows have not expired, and
// the seconds the latest has left; the applied revisions' rows (a second
// '/') are not expiries. meta may not exist yet (an import into a new
// database): then there are none.
var serverRowsLiveSQL = fmt.Sprintf(`SELECT COUNT(*), COALESCE(MAX(value) - %[1]s, 0) / 1000 FROM meta WHERE name LIKE '%[2]s%%' AND name NOT LIKE '%[2]s%%/%%' AND value > %[1]s`,
	nowMs, serverRowPrefix)

// Notifications (listen.go).

// notifySQL notifies the replicas on channel, with a payload.
const notifySQL = `SELECT pg_notify('` + channel + `', $1)`

// probeNotifySQL sends the probe's notification on the channel given.
const probeNotifySQL = `SELECT pg_notify($1, 'probe')`

// listenSQL listens on channel ch.
func listenSQL(ch string) string { return `LISTEN ` + ch }

// unlistenSQL stops listening on channel ch.
func unlistenSQL(ch string) string { return `UNLISTEN ` + ch }

// Maintenance and inspection.
const (
	// sizeSQL is the database's size and that of QuantyKube's tables.
	sizeSQL = `SELECT pg_database_size(current_database()),
		pg_total_relation_size('log') + pg_total_relation_size('current') + pg_total_relation_size('leases') + pg_total_relation_size('meta')`
	// defragmentSQL vacuums and analyzes QuantyKube's tables.
	defragmentSQL = `VACUUM (ANALYZE) log, current, leases, meta`
	// tablesSQL lists the tables and views of the current schema.
	tablesSQL = `SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f')`
)
