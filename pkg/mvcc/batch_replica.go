package mvcc

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The replica batch serves a database that replicas share across a
// network (ReplicaDialect, ADR-007), where every round trip counts: a batch is
// BEGIN, the lock (which reads the committed revision) and one read of the
// floors and of every current row the batch names, sent together; then one
// statement with all of its writes, sent with COMMIT: two round trips
// whatever its size, unless a request reads what the batch did not name
// (a range, a lease's deadline). Writes are held back until the batch
// commits, or until something must read the tables they change.
//
// A batch can also assume instead of reading (ADR-007, "One round trip"):
// while this replica's batches are the only ones committing, the database
// holds what its last batch left, and the batcher remembers the current
// rows its batches read and wrote. A batch whose requests name only rows
// it remembers, or keys a request creates (compares at 0, so absent is
// the likely state), is evaluated from those rows and sent with the lock
// and COMMIT as one pipeline, whose statement writes only if the database
// still holds what was assumed. If not, nothing is written and the batch
// runs again the usual way. Whatever the batch needs beyond those rows (a
// range, a key it did not name) begins the usual transaction first and
// checks the assumption against what it reads.

// replicaBatchTimeout bounds one write batch on a shared database, so that a
// database across the network cannot hang the writer forever.
const replicaBatchTimeout = 30 * time.Second

// maxPendingBytes bounds what one WriteBatch statement carries: PostgreSQL
// refuses a message over 1 GiB, and 512 requests of large values come close.
const maxPendingBytes = 32 << 20

// putBytes is what a put adds to a batch's or an import chunk's statement:
// its key goes to the log and to current, its value to the log only
// (ADR-014).
func putBytes(key, value []byte) int { return 2*len(key) + len(value) }

type replicaBatcher struct {
	s  *Store
	sh ReplicaDialect
	// notify is this replica's prefix for the notifications its batches
	// send (tail.go), so that its own tailer can ignore them.
	notify string
	// mark is what this replica's batches write as meta's writer
	// (WriterMarker; 0 where the dialect keeps none).
	mark int64

	// What the batches may assume, owned by the writer goroutine. last is
	// the state this replica's last batch committed, and known says that
	// it and remembered are what the database held then (false after a batch
	// that failed, whose outcome may be unknown, unless all it found wrong
	// was a row it assumed: forget). calm counts the batches
	// in a row that found the database as the one before left it: another
	// replica writing makes assumptions fail, so they wait for calm.
	// readNext makes the next batch read: the one that runs again after
	// its assumption failed.
	last       BatchStart
	known      bool
	calm       int
	remembered replicaRows
	readNext   bool
}

func (b *replicaBatcher) begin(ctx context.Context, reqs []*writeReq) (batchTx, BatchStart, error) {
	// The pool's one connection, held for the batch: the transaction is
	// the connection's, begun and committed by the dialect's pipelines.
	conn, err := b.s.wdb.Conn(ctx)
	if err != nil {
		return nil, BatchStart{}, err
	}
	keys := batchKeys(reqs)
	tx := &replicaTx{b: b, ctx: ctx, conn: conn, keys: keys, pend: &BatchWrites{}, isDirty: map[string]bool{}}
	// A batch assumes only a state at or past everything this process has
	// handed out: a database that lost revisions could hold that state again.
	if a := b.assume(reqs, keys); a != nil && a.Start.Rev >= b.s.seenRev() {
		tx.assumed = a
		tx.rows = make(staged, len(keys))
		for i, k := range a.Keys {
			tx.rows[string(k)] = a.rows[i]
		}
		return tx, a.Start, nil
	}
	start, err := tx.lock()
	if err != nil {
		release(conn, b.s.sql.ReplicaBatch.Rollback, false)
		b.forget(err)
		return nil, BatchStart{}, err
	}
	return tx, start, nil
}

// lock begins the batch's transaction the usual way: the database-wide
// write lock, and the committed state and the rows of the batch's keys
// read under it, so no other writer changes them before this batch
// commits. Rows the batch assumed must be what it reads.
func (t *replicaTx) lock() (BatchStart, error) {
	b := t.b
	start, kvs, err := b.sh.BeginBatch(t.ctx, t.conn, t.keys)
	if err != nil {
		return start, err
	}
	if seen := b.s.seenRev(); start.Rev < seen {
		// Revisions this process handed out are lost: the next ones would
		// be handed out twice (regress.go).
		return start, &regressedError{db: start.Rev, seen: seen}
	}
	if start == b.last && b.known {
		b.calm++
	} else {
		// Another replica committed, or this one's last batch failed:
		// what it remembers may be out of date.
		b.remembered.clear()
		b.calm = 0
	}
	read := make(staged, len(t.keys))
	for _, k := range t.keys {
		read[string(k)] = nil
	}
	for _, kv := range kvs {
		read[string(kv.Key)] = kv
	}
	if a := t.assumed; a != nil {
		t.assumed = nil
		held := start == a.Start
		for i, k := range a.Keys {
			held = held && read[string(k)].GetModRevision() == a.ModRevs[i]
		}
		if !held {
			metrics.AssumedBatches.WithLabelValues("missed").Inc()
			if start == a.Start {
				return start, ErrAssumedRows
			}
			return start, ErrAssumption
		}
		metrics.AssumedBatches.WithLabelValues("read").Inc()
		// The batch's own writes so far stay over what it read.
		for k, kv := range t.rows {
			read[k] = kv
		}
	}
	t.rows = read
	return start, nil
}

// release returns the writer's connection to its pool, after rolling back
// (rollback, ReplicaBatchSQL's) whatever transaction is open on it unless
// the batch committed. A
// connection that cannot roll back is closed instead: the pool must never
// hand out one inside a transaction.
func release(conn *sql.Conn, rollback string, committed bool) {
	if !committed {
		ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
		_, err := conn.ExecContext(ctx, rollback)
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

type replicaTx struct {
	b    *replicaBatcher
	ctx  context.Context
	conn *sql.Conn
	keys [][]byte // what the batch's requests name (batchKeys)
	rows staged
	// assumed, until the transaction begins, is what the batch assumes
	// instead (nil: it began with the lock).
	assumed *assumption
	// failed is a failure to begin where the batch could not return it:
	// commit answers it.
	failed error
	// The writes held back: log rows in pend, and the keys whose current
	// row changed (its new state is in rows), in first-change order.
	pend      *BatchWrites
	pendBytes int // what the held writes carry (putBytes)
	dirty     []string
	isDirty   map[string]bool
	unixMs    int64
}

// begun makes sure the transaction has begun, with the lock, before the
// batch reads the database.
func (t *replicaTx) begun() error {
	if t.failed == nil && t.assumed != nil {
		_, t.failed = t.lock()
	}
	return t.failed
}

// q is the transaction. Every caller in an assuming batch flushes or
// scans first, which begins it (assume leaves out leases, whose requests
// read their rows through q directly); begun here is a safety net. If it
// fails, no statement may run on the connection, outside the lock: q
// answers the failure instead (commit answers it too).
func (t *replicaTx) q() querier {
	if err := t.begun(); err != nil {
		return failedQuerier{err}
	}
	return t.conn
}

func (t *replicaTx) get(key []byte) (*mvccpb.KeyValue, error) {
	if kv, ok := t.rows[string(key)]; ok {
		return kv, nil
	}
	if err := t.begun(); err != nil {
		return nil, err
	}
	if kv, ok := t.rows[string(key)]; ok {
		return kv, nil
	}
	// Not named by the batch's compares or puts (a single-key delete, say):
	// nothing of the batch's own writes can be pending for it.
	kv, err := getCurrent(t.ctx, t.q(), &t.b.s.sql.Current, key)
	if err == nil {
		t.rows[string(key)] = kv
	}
	return kv, err
}

func (t *replicaTx) scan(kr KeyRange, lease int64) ([]*mvccpb.KeyValue, error) {
	// flush begins the transaction first.
	if err := t.flush(); err != nil {
		return nil, err
	}
	return scanCurrent(t.ctx, t.q(), &t.b.s.sql.Current, kr, lease)
}

func (t *replicaTx) put(kv *mvccpb.KeyValue, sub, unixMs int64) error {
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

func (t *replicaTx) del(key []byte, rev, sub, unixMs int64) error {
	t.unixMs = unixMs
	t.pend.Log = append(t.pend.Log, LogRow{Rev: rev, Sub: sub, Key: key, Deleted: true})
	t.rows[string(key)] = nil
	t.markDirty(key)
	return nil
}

func (t *replicaTx) markDirty(key []byte) {
	if !t.isDirty[string(key)] {
		t.isDirty[string(key)] = true
		t.dirty = append(t.dirty, string(key))
	}
}

// held moves the final state of the dirty keys into pend and returns
// what is held back, or nil when nothing is.
func (t *replicaTx) held() *BatchWrites {
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

func (t *replicaTx) flush() error {
	// What follows a flush reads the tables.
	if err := t.begun(); err != nil {
		return err
	}
	p := t.held()
	if p == nil {
		return nil
	}
	err := t.b.sh.WriteBatch(t.ctx, t.conn, p)
	*p = BatchWrites{Log: p.Log[:0], Put: p.Put[:0], Delete: p.Delete[:0]}
	t.pendBytes = 0
	return err
}

func (t *replicaTx) leaseExpired(id int64) (bool, error) {
	if err := t.begun(); err != nil {
		return false, err
	}
	// Another replica may have renewed, revoked or expired it.
	return t.b.sh.LeaseExpired(t.ctx, t.conn, id)
}

func (t *replicaTx) commit(end batchEnd) error {
	b := t.b
	if t.failed != nil {
		release(t.conn, b.s.sql.ReplicaBatch.Rollback, false)
		b.forget(t.failed)
		return t.failed
	}
	p := t.pend
	p.SetRev, p.Rev, p.Writer = end.rev != end.start.Rev, end.rev, b.mark
	p.SetCompact, p.Compact = end.compact != end.start.Compact, end.compact
	t.unixMs = end.unixMs
	switch {
	case end.leases:
		p.Notify = b.notify + notifyLease
	case p.SetRev || p.SetCompact:
		p.Notify = b.notify + notifyRev
	}
	var err error
	if a := t.assumed; a != nil {
		err = b.sh.CommitAssumed(t.ctx, t.conn, &a.Assumption, t.held())
		switch {
		case err == nil:
			metrics.AssumedBatches.WithLabelValues("one_trip").Inc()
		case errors.Is(err, ErrAssumption):
			metrics.AssumedBatches.WithLabelValues("missed").Inc()
		}
	} else {
		err = b.sh.CommitBatch(t.ctx, t.conn, t.held())
	}
	// The sentinels themselves come after a COMMIT of nothing: the
	// connection is out of its transaction, and needs no ROLLBACK.
	release(t.conn, b.s.sql.ReplicaBatch.Rollback, err == nil || err == ErrAssumption || err == ErrAssumedRows)
	if err != nil {
		b.forget(err)
	}
	switch {
	case err == nil:
		b.remember(end, t.rows)
		return nil
	case errors.Is(err, ErrRolledBack):
		return err
	}
	// The commit may have reached the database: retrying the requests
	// could apply them twice. The next batch re-reads the state.
	return &errCommitUnknown{err: err}
}

// remember records what a batch left: the state its successor starts
// from, and the current rows it read or wrote.
func (b *replicaBatcher) remember(end batchEnd, rows staged) {
	b.last = end.next(b.mark)
	b.known = true
	for k, kv := range rows {
		b.remembered.put(k, kv)
	}
}

func (t *replicaTx) rollback() {
	release(t.conn, t.b.s.sql.ReplicaBatch.Rollback, false)
	err := t.failed
	if err == nil {
		// A failure other than a row the batch assumed: nothing was
		// written, but start again from what the database says rather
		// than judge what the failure left.
		err = errors.New("rolled back")
	}
	t.b.forget(err)
}
