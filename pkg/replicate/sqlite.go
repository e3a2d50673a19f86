package replicate

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/quantyroot/quantykube/pkg/internal/sqltrace"
)

// The statements replication runs on a SQLite store: reads of the log by
// revision in one read transaction, and the meta row of the lineage.
const (
	readRevSQL     = `SELECT value FROM meta WHERE name = 'rev'`
	readMetaSQL    = `SELECT COALESCE((SELECT value FROM meta WHERE name = ?), 0)`
	readFloorSQL   = `SELECT MAX(COALESCE((SELECT MAX(value) FROM meta WHERE name IN ('retain_floor', 'reset')), 0), COALESCE((SELECT MAX(floor) FROM retention), 0))`
	readRowsSQL    = `SELECT rev, sub, key, value, create_rev, version, lease, deleted, unix_ms FROM log WHERE rev > ? AND rev <= ? ORDER BY rev, sub`
	readLeasesSQL  = `SELECT id, ttl FROM leases ORDER BY id`
	initLineageSQL = `INSERT INTO meta (name, value) VALUES ('lineage', ?) ON CONFLICT (name) DO NOTHING`
)

// openWrite opens a read-write connection to the SQLite file path that
// waits for the server's writer rather than failing.
func openWrite(path string) (*sql.DB, error) {
	db, err := sqltrace.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// EnsureLineage returns the store's lineage id, giving it one first when
// it has none (a store replicated for the first time). The store at path
// must exist with QuantyKube's schema.
func EnsureLineage(ctx context.Context, path string) (int64, error) {
	db, err := openWrite(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	id, err := NewLineage()
	if err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, initLineageSQL, id); err != nil {
		return 0, fmt.Errorf("give %s a lineage: %w", path, err)
	}
	var have int64
	if err := db.QueryRowContext(ctx, readMetaSQL, "lineage").Scan(&have); err != nil {
		return 0, fmt.Errorf("read %s's lineage: %w", path, err)
	}
	return have, nil
}

// batch is what one read transaction found after revision `after`.
type batch struct {
	rev   int64 // the store's revision
	floor int64 // the highest floor below which retention may have removed rows
	data  *Data // the rows of (after, data.Last], nil when the store is at after
}

// scratch is the memory readBatch reads rows into, kept from one segment
// to the next (see encoder): a Data it returns is valid until release.
type scratch struct {
	rows  []Row
	bytes []byte // the rows' keys and values
}

// release ends the last Data's use of the scratch. Its memory is kept
// for the next segment only where that one used at least half of it: a
// backlog's large segment (up to Config.SegmentBytes) is let go at once.
// The rows are cleared to their capacity, since the collector follows a
// slice's whole array: rows past the length would hold on to every array
// sc.bytes outgrew.
func (sc *scratch) release() {
	clear(sc.rows[:cap(sc.rows)])
	if cap(sc.rows) > 2*len(sc.rows) {
		sc.rows = nil
	}
	if cap(sc.bytes) > 2*len(sc.bytes) {
		sc.bytes = nil
	}
	sc.rows, sc.bytes = sc.rows[:0], sc.bytes[:0]
}

// readBatch reads, in one read transaction, the store's revision and
// floors and the log rows of revisions after `after`, up to about maxBytes
// of keys and values (whole revisions: at least one).
func readBatch(ctx context.Context, db *sql.DB, after int64, maxBytes int, sc *scratch) (batch, error) {
	var b batch
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return b, err
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, readRevSQL).Scan(&b.rev); err != nil {
		return b, fmt.Errorf("read the revision: %w", err)
	}
	if err := tx.QueryRowContext(ctx, readFloorSQL).Scan(&b.floor); err != nil {
		return b, fmt.Errorf("read the retention floors: %w", err)
	}
	if b.rev <= after {
		return b, nil
	}
	d := &Data{Format: segmentFormat, First: after + 1, Last: b.rev}
	if err := tx.QueryRowContext(ctx, readMetaSQL, "compact").Scan(&d.Compact); err != nil {
		return b, fmt.Errorf("read the compaction floor: %w", err)
	}
	if err := tx.QueryRowContext(ctx, readMetaSQL, "retain_floor").Scan(&d.RetainFloor); err != nil {
		return b, fmt.Errorf("read the retention floor: %w", err)
	}
	rows, err := tx.QueryContext(ctx, readRowsSQL, after, b.rev)
	if err != nil {
		return b, fmt.Errorf("read the log: %w", err)
	}
	d.Rows = sc.rows[:0]
	size := 0
	var key, value sql.RawBytes
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.Rev, &r.Sub, &key, &value, &r.CreateRev, &r.Version, &r.Lease, &r.Deleted, &r.UnixMs); err != nil {
			rows.Close()
			return b, fmt.Errorf("read the log: %w", err)
		}
		if size >= maxBytes && len(d.Rows) > 0 && r.Rev != d.Rows[len(d.Rows)-1].Rev {
			// Whole revisions only: the next segment starts here.
			d.Last = r.Rev - 1
			break
		}
		// A row's key and value are copied into sc.bytes, one after the
		// other; when it grows, the rows already read keep the old array.
		start := len(sc.bytes)
		sc.bytes = append(append(sc.bytes, key...), value...)
		r.Key = sc.bytes[start : start+len(key) : start+len(key)]
		r.Value = sc.bytes[start+len(key) : len(sc.bytes) : len(sc.bytes)]
		r.ValueNull = value == nil
		size += len(r.Key) + len(r.Value) + 64
		d.Rows = append(d.Rows, r)
	}
	sc.rows = d.Rows
	rows.Close()
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("read the log: %w", err)
	}
	lrows, err := tx.QueryContext(ctx, readLeasesSQL)
	if err != nil {
		return b, fmt.Errorf("read the leases: %w", err)
	}
	defer lrows.Close()
	for lrows.Next() {
		var l Lease
		if err := lrows.Scan(&l.ID, &l.TTL); err != nil {
			return b, fmt.Errorf("read the leases: %w", err)
		}
		d.Leases = append(d.Leases, l)
	}
	if err := lrows.Err(); err != nil {
		return b, fmt.Errorf("read the leases: %w", err)
	}
	b.data = d
	return b, nil
}
