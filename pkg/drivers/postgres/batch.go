package postgres

// The write batch (mvcc.ReplicaDialect): the lock every replica's batches take in
// turn, the read of the state they start from, and the writes, sent as
// two pgx pipelines (ADR-007, "Two round trips").

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// LockBatch locks meta's rev row for the rest of the transaction: batches
// of every replica commit one after another, each starting from the
// revision the previous one committed.
func (d *Dialect) LockBatch(ctx context.Context, q mvcc.Querier, keys [][]byte) (mvcc.BatchStart, []*mvccpb.KeyValue, error) {
	var st mvcc.BatchStart
	if err := q.QueryRowContext(ctx, lockBatchSQL).Scan(&st.Rev); err != nil {
		return st, nil, err
	}
	rows, err := q.QueryContext(ctx, lockedStateSQL, keys)
	if err != nil {
		return st, nil, err
	}
	defer rows.Close()
	kvs, err := scanLockedState(rows, &st)
	return st, kvs, err
}

// BeginBatch sends BEGIN and LockBatch's two statements as one pipeline:
// the server runs them in order, each after the one before has finished,
// so the read still happens under the lock, and the batch pays one round
// trip for all three.
func (d *Dialect) BeginBatch(ctx context.Context, conn *sql.Conn, keys [][]byte) (st mvcc.BatchStart, kvs []*mvccpb.KeyValue, err error) {
	err = withPgx(conn, func(c *pgx.Conn) error {
		b := &pgx.Batch{}
		d.queueBegin(b)
		b.Queue(lockBatchSQL).QueryRow(func(r pgx.Row) error { return r.Scan(&st.Rev) })
		b.Queue(lockedStateSQL, keys).Query(func(rows pgx.Rows) error {
			var err error
			kvs, err = scanLockedState(rows, &st)
			return err
		})
		return c.SendBatch(ctx, b).Close()
	})
	return st, kvs, err
}

// CommitBatch sends the batch's writes and COMMIT as one pipeline. Its
// error says whether the batch certainly did not commit (mvcc.ErrRolledBack):
// the server refused the writes (it then skips the COMMIT queued behind
// them), refused the COMMIT with an ERROR, or nothing was sent. Any other
// failure, a connection lost after sending, leaves the outcome unknown.
func (d *Dialect) CommitBatch(ctx context.Context, conn *sql.Conn, w *mvcc.BatchWrites) error {
	return withPgx(conn, func(c *pgx.Conn) error {
		b := &pgx.Batch{}
		if w != nil {
			b.Queue(writeBatchSQL, writeBatchArgs(w, nil)...)
		}
		return sendCommit(ctx, c, b, 0, w != nil)
	})
}

// CommitAssumed sends BEGIN, the lock, the writes guarded by the check of
// a, and COMMIT as one pipeline. The check runs in the writes' statement,
// after the lock, so it sees what the batch before (of any replica)
// committed; when it fails, the statement writes nothing and the COMMIT
// that follows commits only the lock's UPDATE, which changes nothing.
func (d *Dialect) CommitAssumed(ctx context.Context, conn *sql.Conn, a *mvcc.Assumption, w *mvcc.BatchWrites) error {
	if w == nil {
		// The statement carries the check: it goes even with nothing to write.
		w = &mvcc.BatchWrites{}
	}
	return withPgx(conn, func(c *pgx.Conn) error {
		b := &pgx.Batch{}
		n := d.queueBegin(b)
		b.Queue(lockBatchSQL)
		b.Queue(writeBatchSQL, writeBatchArgs(w, a)...)
		return sendCommit(ctx, c, b, n+1, true)
	})
}

// sendCommit queues COMMIT after b's statements and sends them: first
// statements that return nothing of interest (BEGIN, the lock), then, if
// writes, writeBatchSQL. It tells a refusal, after which nothing committed,
// from an unknown outcome (see CommitBatch).
func sendCommit(ctx context.Context, c *pgx.Conn, b *pgx.Batch, first int, writes bool) error {
	b.Queue(commitSQL)
	br := c.SendBatch(ctx, b)
	defer br.Close()
	refused := func(err error) error {
		var pe *pgconn.PgError
		if errors.As(err, &pe) || pgconn.SafeToRetry(err) {
			return fmt.Errorf("%w: %w", mvcc.ErrRolledBack, err)
		}
		return err
	}
	for range first {
		if _, err := br.Exec(); err != nil {
			return refused(err)
		}
	}
	applied, metaHeld := true, true
	if writes {
		if err := br.QueryRow().Scan(&applied, &metaHeld); err != nil {
			return refused(err)
		}
	}
	missed := mvcc.ErrAssumption
	if metaHeld {
		missed = mvcc.ErrAssumedRows
	}
	tag, err := br.Exec()
	var pe *pgconn.PgError
	switch {
	case !applied && err == nil && tag.String() == "COMMIT":
		// The check failed and nothing was written; the transaction of the
		// lock alone (its UPDATE that changes nothing) is over.
		return missed
	case !applied:
		// Nothing was written either, but the transaction may still be
		// open: not the sentinel itself, so the caller rolls back.
		return fmt.Errorf("%w (the COMMIT after it: %v)", missed, errOrTag(err, tag))
	case err == nil && tag.String() != "COMMIT":
		// COMMIT in a failed transaction answers ROLLBACK.
		return fmt.Errorf("%w: COMMIT answered %q", mvcc.ErrRolledBack, tag.String())
	case err == nil:
		// Committed: what follows its answer does not change that.
		return nil
	case errors.As(err, &pe) && pe.SeverityUnlocalized == "ERROR", pgconn.SafeToRetry(err):
		// A FATAL error may end the session during a commit that has
		// already reached the log: only an ERROR is a refusal.
		return fmt.Errorf("%w: %w", mvcc.ErrRolledBack, err)
	}
	return err
}

func errOrTag(err error, tag pgconn.CommandTag) any {
	if err != nil {
		return err
	}
	return tag.String()
}

// queueBegin queues BEGIN, and behind a pooler the statement timeout a
// session setting gives a direct connection; it returns how many
// statements it queued.
func (d *Dialect) queueBegin(b *pgx.Batch) int {
	b.Queue(beginSQL)
	if d.pooled.Load() && d.opts.StatementTimeout > 0 {
		b.Queue(d.setLocalTimeout)
		return 2
	}
	return 1
}

// withPgx runs f on the pgx connection beneath conn: pipelines have no
// database/sql form.
func withPgx(conn *sql.Conn, f func(*pgx.Conn) error) error {
	return conn.Raw(func(dc any) error {
		c, ok := dc.(pgxConner)
		if !ok {
			return fmt.Errorf("postgres: the writer's connection is a %T, not pgx's", dc)
		}
		return f(c.Conn())
	})
}

// rowScanner is database/sql's rows or pgx's.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanLockedState reads lockedStateSQL's rows: the floors into st, and
// the current rows.
func scanLockedState(rows rowScanner, st *mvcc.BatchStart) ([]*mvccpb.KeyValue, error) {
	var kvs []*mvccpb.KeyValue
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		if err := rows.Scan(&kv.Key, &kv.Value, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease); err != nil {
			return nil, err
		}
		if kv.Key == nil {
			st.Compact, st.LastUnixMs = kv.CreateRevision, kv.ModRevision
			continue
		}
		kvs = append(kvs, kv)
	}
	return kvs, rows.Err()
}

// WriteBatch sends the batch in one round trip (see writeBatchSQL).
func (d *Dialect) WriteBatch(ctx context.Context, q mvcc.Querier, w *mvcc.BatchWrites) error {
	_, err := q.ExecContext(ctx, writeBatchSQL, writeBatchArgs(w, nil)...)
	return err
}

// writeBatchArgs are writeBatchSQL's parameters for w, checked against a
// unless it is nil.
func writeBatchArgs(w *mvcc.BatchWrites, a *mvcc.Assumption) []any {
	n := len(w.Log)
	rev, sub, create, version, lease := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	keys, values := make([][]byte, n), make([][]byte, n)
	deleted := make([]int16, n)
	for i, r := range w.Log {
		rev[i], sub[i], keys[i], values[i] = r.Rev, r.Sub, r.Key, r.Value
		create[i], version[i], lease[i] = r.CreateRev, r.Version, r.Lease
		if r.Deleted {
			deleted[i] = 1
		}
	}
	m := len(w.Put)
	pk := make([][]byte, m)
	pc, pm, pver, pl := make([]int64, m), make([]int64, m), make([]int64, m), make([]int64, m)
	for i, kv := range w.Put {
		pk[i], pc[i], pm[i], pver[i], pl[i] = kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease
	}
	del := w.Delete
	if del == nil {
		del = [][]byte{}
	}
	check, expect := a != nil, &mvcc.Assumption{Keys: [][]byte{}, ModRevs: []int64{}}
	if check {
		expect = a
	}
	return []any{w.UnixMs,
		rev, sub, keys, values, create, version, lease, deleted,
		pk, pc, pm, pver, pl,
		del, w.Rev, w.Compact, w.SetRev, w.SetCompact, w.Notify,
		check, expect.Start.Rev, expect.Start.Compact, expect.Start.LastUnixMs, expect.Keys, expect.ModRevs}
}
