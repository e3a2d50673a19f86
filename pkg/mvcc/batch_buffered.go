package mvcc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The buffered batch serves a database that replicas share across a
// network (Shared, ADR-007), where every round trip counts: a batch is
// BEGIN, the lock (which reads the committed revision) and one read of the
// floors and of every current row the batch names, sent together; then one
// statement with all of its writes, sent with COMMIT: two round trips
// whatever its size, unless a request reads what the batch did not name
// (a range, a lease's deadline). Writes are held back until the batch
// commits, or until something must read the tables they change.

// sharedBatchTimeout bounds one write batch on a shared database, so that a
// database across the network cannot hang the writer forever.
const sharedBatchTimeout = 30 * time.Second

// maxPendingBytes bounds what one WriteBatch statement carries: PostgreSQL
// refuses a message over 1 GiB, and 512 requests of large values come close.
const maxPendingBytes = 32 << 20

// putBytes is what a put adds to a batch's or an import chunk's statement:
// its key goes to the log and to current, its value to the log only
// (ADR-014).
func putBytes(key, value []byte) int { return 2*len(key) + len(value) }

type bufferedBatcher struct {
	s  *Store
	sh Shared
	// notify is this replica's prefix for the notifications its batches
	// send (tail.go), so that its own tailer can ignore them.
	notify string
}

func (b *bufferedBatcher) begin(ctx context.Context, reqs []*writeReq) (batchTx, BatchStart, error) {
	// The pool's one connection, held for the batch: the transaction is
	// the connection's, begun and committed by the dialect's pipelines.
	conn, err := b.s.wdb.Conn(ctx)
	if err != nil {
		return nil, BatchStart{}, err
	}
	// Other replicas may have committed since our last batch: take the
	// database-wide write lock and start from what is committed.
	keys := batchKeys(reqs)
	start, kvs, err := b.sh.BeginBatch(ctx, conn, keys)
	if err != nil {
		release(conn, false)
		return nil, BatchStart{}, err
	}
	// Read under the lock, so no other writer changes them before this
	// batch commits.
	rows := make(staged, len(keys))
	for _, k := range keys {
		rows[string(k)] = nil
	}
	for _, kv := range kvs {
		rows[string(kv.Key)] = kv
	}
	return &bufferedTx{b: b, ctx: ctx, conn: conn, rows: rows, pend: &BatchWrites{}, isDirty: map[string]bool{}}, start, nil
}

// release returns the writer's connection to its pool, after rolling back
// whatever transaction is open on it unless the batch committed. A
// connection that cannot roll back is closed instead: the pool must never
// hand out one inside a transaction.
func release(conn *sql.Conn, committed bool) {
	if !committed {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		_, err := conn.ExecContext(ctx, "ROLLBACK")
		cancel()
		if err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	conn.Close()
}

// rollbackTimeout bounds the ROLLBACK of a failed batch: a database that
// does not answer it loses the connection instead.
const rollbackTimeout = 10 * time.Second

type bufferedTx struct {
	b    *bufferedBatcher
	ctx  context.Context
	conn *sql.Conn
	rows staged
	// The writes held back: log rows in pend, and the keys whose current
	// row changed (its new state is in rows), in first-change order.
	pend      *BatchWrites
	pendBytes int // what the held writes carry (putBytes)
	dirty     []string
	isDirty   map[string]bool
	unixMs    int64
}

func (t *bufferedTx) q() querier { return binder{on: t.conn, d: t.b.s.d} }

func (t *bufferedTx) get(key []byte) (*mvccpb.KeyValue, error) {
	if kv, ok := t.rows[string(key)]; ok {
		return kv, nil
	}
	// Not named by the batch's compares or puts (a single-key delete, say):
	// nothing of the batch's own writes can be pending for it.
	kv, err := getCurrent(t.ctx, t.q(), key)
	if err == nil {
		t.rows[string(key)] = kv
	}
	return kv, err
}

func (t *bufferedTx) scan(kr KeyRange, lease int64) ([]*mvccpb.KeyValue, error) {
	if err := t.flush(); err != nil {
		return nil, err
	}
	return scanCurrent(t.ctx, t.q(), t.b.s.q, kr, lease)
}

func (t *bufferedTx) put(kv *mvccpb.KeyValue, sub, unixMs int64) error {
	t.unixMs = unixMs
	t.pend.Log = append(t.pend.Log, LogRow{Rev: kv.ModRevision, Sub: sub, Key: kv.Key, Value: kv.Value,
		CreateRev: kv.CreateRevision, Version: kv.Version, Lease: kv.Lease})
	t.rows[string(kv.Key)] = kv
	t.markDirty(kv.Key)
	t.pendBytes += putBytes(kv.Key, kv.Value)
	if t.pendBytes > maxPendingBytes {
		return t.flush()
	}
	return nil
}

func (t *bufferedTx) del(key []byte, rev, sub, unixMs int64) error {
	t.unixMs = unixMs
	t.pend.Log = append(t.pend.Log, LogRow{Rev: rev, Sub: sub, Key: key, Deleted: true})
	t.rows[string(key)] = nil
	t.markDirty(key)
	return nil
}

func (t *bufferedTx) markDirty(key []byte) {
	if !t.isDirty[string(key)] {
		t.isDirty[string(key)] = true
		t.dirty = append(t.dirty, string(key))
	}
}

// held moves the final state of the dirty keys into pend and returns
// what is held back, or nil when nothing is.
func (t *bufferedTx) held() *BatchWrites {
	p := t.pend
	for _, k := range t.dirty {
		if kv := t.rows[k]; kv != nil {
			p.Put = append(p.Put, kv)
		} else {
			p.Delete = append(p.Delete, []byte(k))
		}
	}
	t.dirty = t.dirty[:0]
	clear(t.isDirty)
	if p.empty() {
		return nil
	}
	p.UnixMs = t.unixMs
	return p
}

func (t *bufferedTx) flush() error {
	p := t.held()
	if p == nil {
		return nil
	}
	err := t.b.sh.WriteBatch(t.ctx, t.conn, p)
	*p = BatchWrites{Log: p.Log[:0], Put: p.Put[:0], Delete: p.Delete[:0]}
	t.pendBytes = 0
	return err
}

func (t *bufferedTx) leaseExpired(id int64) (bool, error) {
	// Another replica may have renewed, revoked or expired it.
	return t.b.sh.LeaseExpired(t.ctx, t.conn, id)
}

func (t *bufferedTx) commit(end batchEnd) error {
	p := t.pend
	p.SetRev, p.Rev = end.rev != end.start.Rev, end.rev
	p.SetCompact, p.Compact = end.compact != end.start.Compact, end.compact
	t.unixMs = end.unixMs
	switch {
	case end.leases:
		p.Notify = t.b.notify + notifyLease
	case p.SetRev || p.SetCompact:
		p.Notify = t.b.notify + notifyRev
	}
	err := t.b.sh.CommitBatch(t.ctx, t.conn, t.held())
	release(t.conn, err == nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrRolledBack):
		return err
	}
	// The commit may have reached the database: retrying the requests
	// could apply them twice. The next batch re-reads the state.
	return &errCommitUnknown{err: err}
}

func (t *bufferedTx) rollback() { release(t.conn, false) }
