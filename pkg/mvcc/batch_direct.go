package mvcc

import (
	"context"
	"database/sql"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The direct batch writes each row as it is made, through statements
// prepared once on the writer's connection: with the database in this
// process (SQLite) a statement costs microseconds, not a round trip. This
// process is the database's only writer, so the batcher starts each batch
// from the state the previous one left, and the writer's reads of current
// rows come from the live index when it serves.

// The direct batch's statements, prepared once on the writer's connection.
const (
	sqlSetRev        = `UPDATE meta SET value = ? WHERE name = 'rev'`
	sqlSetLastUnixMs = `UPDATE meta SET value = ? WHERE name = 'last_unix_ms'`
	sqlSetCompact    = `UPDATE meta SET value = ? WHERE name = 'compact'`
	sqlGetCurrent    = `SELECT value, create_rev, mod_rev, version, lease FROM current WHERE key = ?`
	sqlInsertPut     = `INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)`
	sqlInsertDelete  = `INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, ?, NULL, 0, 0, 0, 1, ?)`
	sqlDeleteCurrent = `DELETE FROM current WHERE key = ?`
	sqlUpsertCurrent = `INSERT INTO current (key, value, create_rev, mod_rev, version, lease) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value, create_rev = excluded.create_rev, mod_rev = excluded.mod_rev, version = excluded.version, lease = excluded.lease`
	sqlMeta          = `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact'), (SELECT value FROM meta WHERE name = 'last_unix_ms')`
)

var directSQL = []string{sqlSetRev, sqlSetLastUnixMs, sqlSetCompact, sqlGetCurrent, sqlInsertPut, sqlInsertDelete, sqlDeleteCurrent, sqlUpsertCurrent, sqlLeaseExists, sqlInsertLease, sqlDeleteLease}

type directBatcher struct {
	s    *Store
	last BatchStart // what the previous batch committed
	// uncertain is set when a commit failed: it may still have taken
	// effect, so the next batch reads its start from the database and
	// reloads the live index.
	uncertain bool
}

func newDirectBatcher(ctx context.Context, s *Store, st BatchStart) (*directBatcher, error) {
	// One writer connection: statements prepared on it now are reused by
	// every batch's transaction without being parsed again.
	if err := s.wstmts.warm(ctx, directSQL...); err != nil {
		return nil, err
	}
	return &directBatcher{s: s, last: st}, nil
}

func (b *directBatcher) begin(ctx context.Context, _ []*writeReq) (batchTx, BatchStart, error) {
	sqltx, err := b.s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return nil, BatchStart{}, err
	}
	tx := &directTx{b: b, ctx: ctx, tx: prepTx{tx: sqltx, p: b.s.wstmts, local: map[string]*sql.Stmt{}}, rows: staged{}, index: b.s.index.Load()}
	start := b.last
	if b.uncertain {
		if err := tx.tx.QueryRowContext(ctx, sqlMeta).Scan(&start.Rev, &start.Compact, &start.LastUnixMs); err != nil {
			sqltx.Rollback()
			return nil, BatchStart{}, err
		}
		if tx.index != nil {
			// Inside this transaction: exactly the committed state at start.Rev.
			if tx.index, err = b.s.reloadIndex(ctx, tx.tx, start.Rev); err != nil {
				sqltx.Rollback()
				return nil, BatchStart{}, err
			}
		}
		b.last, b.uncertain = start, false
	}
	return tx, start, nil
}

type directTx struct {
	b     *directBatcher
	ctx   context.Context
	tx    prepTx
	rows  staged
	index *liveIndex // nil: current rows come from SQL
}

func (t *directTx) q() querier { return t.tx }

func (t *directTx) get(key []byte) (*mvccpb.KeyValue, error) {
	if kv, ok := t.rows[string(key)]; ok {
		return kv, nil
	}
	if t.index != nil {
		// The committed state, as the transaction would read it.
		kv := t.index.get(key)
		t.rows[string(key)] = kv
		return kv, nil
	}
	kv, err := getCurrent(t.ctx, t.tx, key)
	if err == nil {
		t.rows[string(key)] = kv
	}
	return kv, err
}

func (t *directTx) scan(kr KeyRange, lease int64) ([]*mvccpb.KeyValue, error) {
	// The transaction sees this batch's writes: they went out as made.
	return scanCurrent(t.ctx, t.tx, t.b.s.q, kr, lease)
}

func (t *directTx) put(kv *mvccpb.KeyValue, sub, unixMs int64) error {
	if _, err := t.tx.ExecContext(t.ctx, sqlInsertPut,
		kv.ModRevision, sub, kv.Key, kv.Value, kv.CreateRevision, kv.Version, kv.Lease, unixMs); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(t.ctx, sqlUpsertCurrent,
		kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease); err != nil {
		return err
	}
	t.rows[string(kv.Key)] = kv
	return nil
}

func (t *directTx) del(key []byte, rev, sub, unixMs int64) error {
	if _, err := t.tx.ExecContext(t.ctx, sqlInsertDelete, rev, sub, key, unixMs); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(t.ctx, sqlDeleteCurrent, key); err != nil {
		return err
	}
	t.rows[string(key)] = nil
	return nil
}

func (t *directTx) flush() error { return nil }

func (t *directTx) leaseExpired(id int64) (bool, error) {
	// Deadlines live in this process's memory (lease.go).
	return t.b.s.leases.isExpired(id), nil
}

func (t *directTx) commit(end batchEnd) error {
	fail := func(err error) error {
		t.tx.tx.Rollback()
		return err
	}
	if end.rev != end.start.Rev {
		if _, err := t.tx.ExecContext(t.ctx, sqlSetRev, end.rev); err != nil {
			return fail(err)
		}
		if _, err := t.tx.ExecContext(t.ctx, sqlSetLastUnixMs, end.unixMs); err != nil {
			return fail(err)
		}
	}
	if end.compact != end.start.Compact {
		if _, err := t.tx.ExecContext(t.ctx, sqlSetCompact, end.compact); err != nil {
			return fail(err)
		}
	}
	if err := t.tx.tx.Commit(); err != nil {
		// It may have reached the disk (SQLite reports an I/O error of the
		// sync after the WAL frames are written, and they count after a
		// restart): start over from the database, stop serving reads from
		// an index that may be behind it, and do not apply the batch's
		// requests again.
		t.b.uncertain = true
		t.b.s.staleIndex()
		return &errCommitUnknown{err: err}
	}
	t.b.last = BatchStart{Rev: end.rev, Compact: end.compact, LastUnixMs: end.start.LastUnixMs}
	if end.rev != end.start.Rev {
		t.b.last.LastUnixMs = end.unixMs
	}
	return nil
}

func (t *directTx) rollback() { t.tx.tx.Rollback() }
