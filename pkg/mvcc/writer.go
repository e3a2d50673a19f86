package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The writer's hot statements, prepared once on its connection (SQLite).
const (
	sqlSetRev        = `UPDATE meta SET value = ? WHERE name = 'rev'`
	sqlSetLastUnixMs = `UPDATE meta SET value = ? WHERE name = 'last_unix_ms'`
	sqlGetCurrent    = `SELECT value, create_rev, mod_rev, version, lease FROM current WHERE key = ?`
	sqlInsertPut     = `INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)`
	sqlInsertDelete  = `INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, ?, NULL, 0, 0, 0, 1, ?)`
	sqlDeleteCurrent = `DELETE FROM current WHERE key = ?`
	sqlLeaseExists   = `SELECT 1 FROM leases WHERE id = ?`
	sqlUpsertCurrent = `INSERT INTO current (key, value, create_rev, mod_rev, version, lease) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value, create_rev = excluded.create_rev, mod_rev = excluded.mod_rev, version = excluded.version, lease = excluded.lease`
)

var hotWriterSQL = []string{sqlSetRev, sqlSetLastUnixMs, sqlGetCurrent, sqlInsertPut, sqlInsertDelete, sqlDeleteCurrent, sqlLeaseExists, sqlUpsertCurrent}

type writeKind int

const (
	wTxn writeKind = iota
	wCompact
	wLeaseGrant
	wLeaseRevoke
	wLeaseExpire
	wDefrag
)

type writeReq struct {
	kind    writeKind
	txn     *pb.TxnRequest
	rev     int64 // Compact
	leaseID int64
	ttl     int64
	done    chan writeResult
}

type writeResult struct {
	txn     *pb.TxnResponse
	rev     int64 // the store's revision after this request
	leaseID int64
	ttl     int64
	err     error
}

// submit queues a request for the writer and waits for its durable outcome.
// A caller that gives up (ctx) may still see its write committed, as with etcd.
func (s *Store) submit(ctx context.Context, req *writeReq) writeResult {
	if s.closed.Load() {
		return writeResult{err: ErrClosed}
	}
	req.done = make(chan writeResult, 1)
	select {
	case s.reqs <- req:
	case <-s.done:
		return writeResult{err: ErrClosed}
	case <-ctx.Done():
		return writeResult{err: ctx.Err()}
	}
	select {
	case res := <-req.done:
		return res
	case <-s.done:
		select {
		case res := <-req.done:
			return res
		default:
			return writeResult{err: ErrClosed}
		}
	case <-ctx.Done():
		return writeResult{err: ctx.Err()}
	}
}

// row is the current state of one key inside the writer.
type row = mvccpb.KeyValue

// writer is the single goroutine that changes the database. Each batch of
// queued requests is one SQL transaction and one fsync; every request in it
// gets its own revision and its own compare outcome, and sees the requests
// before it. Nobody is answered before the commit, and events are published
// after the commit and before the answers, so an acknowledged write is both
// durable and visible to every watcher.
type writer struct {
	s          *Store
	rev        int64
	compact    int64
	lastUnixMs int64

	// batch state
	ctx       context.Context
	tx        cachedTx
	unixMs    int64
	cache     map[string]*row // current rows touched in this batch; nil = absent
	events    []*Event
	granted   map[int64]int64
	revoked   map[int64]bool
	compactTo int64

	// Shared databases only: the batch's log rows and changed current rows,
	// sent in one statement (sh.WriteBatch) when the batch ends or before
	// it reads what it wrote. Every statement there is a network round
	// trip; one per row was most of a batch's time.
	pend      *BatchWrites
	pendBytes int      // keys and values held in pend, each counted for the log and for current
	dirty     []string // keys whose current row changed and is not yet sent, in first-change order
	isDirty   map[string]bool
}

func newWriter(s *Store, st persisted) *writer {
	return &writer{s: s, rev: st.rev, compact: st.compact, lastUnixMs: st.lastUnixMs}
}

func (w *writer) run() {
	defer close(w.s.done)
	batch := make([]*writeReq, 0, w.s.opts.MaxBatch)
	for {
		var first *writeReq
		select {
		case first = <-w.s.reqs:
		case <-w.s.stop:
			// Finish what was queued before the stop, then refuse the rest.
			for {
				select {
				case r := <-w.s.reqs:
					w.process(append(batch[:0], r))
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < w.s.opts.MaxBatch {
			select {
			case r := <-w.s.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		w.process(batch)
	}
}

// process commits a batch; if the database refuses it, each request is
// retried alone so that one bad request cannot fail its neighbours.
func (w *writer) process(batch []*writeReq) {
	// Defragment cannot run inside a transaction: give it a batch of its own.
	for i, r := range batch {
		if r.kind == wDefrag {
			w.process(batch[:i])
			err := w.s.d.Defragment(context.Background(), w.s.wdb)
			r.done <- writeResult{rev: w.rev, err: err}
			w.process(batch[i+1:])
			return
		}
	}
	if len(batch) == 0 {
		return
	}
	start := time.Now()
	results, err := w.commit(batch)
	metrics.WriteBatchSize.Observe(float64(len(batch)))
	metrics.CommitSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		metrics.CommitFailures.Inc()
	}
	var unknown *commitUnknown
	if err != nil && len(batch) > 1 && !errors.As(err, &unknown) {
		for _, r := range batch {
			w.process([]*writeReq{r})
		}
		return
	}
	for i, r := range batch {
		if err != nil {
			r.done <- writeResult{err: fmt.Errorf("commit: %w", err)}
			continue
		}
		r.done <- results[i]
	}
}

func (w *writer) commit(batch []*writeReq) ([]writeResult, error) {
	ctx := context.Background()
	if w.s.sh != nil {
		// A database across the network must not hang the writer forever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sharedBatchTimeout)
		defer cancel()
	}
	sqltx, err := w.s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	var prefetched []*row
	var prefetchKeys [][]byte
	if w.s.sh != nil {
		// Other replicas may have committed since our last batch: take the
		// database-wide write lock and start from what is committed.
		prefetchKeys = batchKeys(batch)
		st, rows, err := w.s.sh.LockBatch(ctx, sqltx, prefetchKeys)
		if err != nil {
			sqltx.Rollback()
			return nil, err
		}
		w.rev, w.compact = st.Rev, st.Compact
		w.lastUnixMs = max(w.lastUnixMs, st.LastUnixMs)
		prefetched = rows
	}
	tx := cachedTx{tx: sqltx, c: w.s.wstmts, local: map[string]*sql.Stmt{}}
	if err := w.s.refreshCache(ctx, tx, w.rev); err != nil {
		sqltx.Rollback()
		return nil, err
	}
	if w.s.sh != nil {
		// pgx already keeps a prepared statement per query and connection;
		// preparing per batch would only add round trips.
		tx.local = nil
	}
	startRev, startCompact := w.rev, w.compact
	w.ctx, w.tx = ctx, tx
	w.cache = make(map[string]*row, len(prefetchKeys))
	if w.s.sh != nil {
		// Read under the batch lock, so no other writer changes them
		// before this batch commits.
		for _, k := range prefetchKeys {
			w.cache[string(k)] = nil
		}
		for _, kv := range prefetched {
			w.cache[string(kv.Key)] = kv
		}
		w.pend = &BatchWrites{}
		w.pendBytes = 0
		w.dirty = w.dirty[:0]
		w.isDirty = map[string]bool{}
	}
	w.events = w.events[:0]
	w.granted = map[int64]int64{}
	w.revoked = map[int64]bool{}
	w.compactTo = w.compact
	now := w.s.opts.Now().UnixMilli()
	// Time never runs backwards in the log, so revision order and time
	// order agree even when the wall clock steps back.
	w.unixMs = max(now, w.lastUnixMs)

	results := make([]writeResult, len(batch))
	fail := func(err error) ([]writeResult, error) {
		sqltx.Rollback()
		w.rev, w.compact = startRev, startCompact
		w.tx = cachedTx{}
		w.pend = nil
		return nil, err
	}
	for i, r := range batch {
		res, err := w.apply(r)
		if err != nil {
			return fail(err)
		}
		res.rev = w.rev
		results[i] = res
	}
	if w.s.sh != nil {
		b := w.pend
		b.SetRev, b.Rev = w.rev != startRev, w.rev
		b.SetCompact, b.Compact = w.compactTo != startCompact, w.compactTo
		if b.SetRev || b.SetCompact || len(w.granted) > 0 || len(w.revoked) > 0 {
			b.Notify = w.s.tail.instance + notifyRev
			if len(w.granted) > 0 || len(w.revoked) > 0 {
				b.Notify = w.s.tail.instance + notifyLease
			}
		}
		if err := w.flush(); err != nil {
			return fail(err)
		}
		w.pend = nil
	} else {
		if w.rev != startRev {
			if _, err := tx.ExecContext(ctx, sqlSetRev, w.rev); err != nil {
				return fail(err)
			}
			if _, err := tx.ExecContext(ctx, sqlSetLastUnixMs, w.unixMs); err != nil {
				return fail(err)
			}
		}
		if w.compactTo != startCompact {
			if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE name = 'compact'`, w.compactTo); err != nil {
				return fail(err)
			}
		}
	}
	if err := sqltx.Commit(); err != nil {
		// The commit may still have happened: the cache reloads from the
		// database before it serves again.
		w.s.cacheBatch(0, nil, false)
		if w.s.sh != nil {
			// The commit may have reached the database: retrying the
			// requests could apply them twice.
			err = &commitUnknown{err: err}
		}
		return fail(err)
	}
	w.tx = cachedTx{}
	if w.rev != startRev {
		w.lastUnixMs = w.unixMs
	}
	w.compact = w.compactTo
	if w.s.tail != nil {
		evs := make([]*Event, len(w.events))
		copy(evs, w.events)
		granted, revoked := w.granted, w.revoked
		w.s.tail.published(startRev, w.rev, w.compact, evs, func() {
			for id, ttl := range granted {
				w.s.leases.add(id, ttl)
			}
			for id := range revoked {
				w.s.leases.remove(id)
			}
		})
		return results, nil
	}
	if w.rev != startRev {
		// Before anyone is answered: a read after the answer sees the batch.
		w.s.cacheBatch(w.rev, w.events, true)
	}
	w.s.compact.Store(w.compact)
	w.s.committed.Store(w.rev)
	for id, ttl := range w.granted {
		w.s.leases.add(id, ttl)
	}
	for id := range w.revoked {
		w.s.leases.remove(id)
	}
	if w.rev != startRev {
		evs := make([]*Event, len(w.events))
		copy(evs, w.events)
		w.s.hub.publish(w.rev, evs)
	}
	return results, nil
}

// apply runs one request inside the batch transaction. A returned error is
// a database failure that aborts the batch; a refused request carries its
// error in the result and has changed nothing.
func (w *writer) apply(r *writeReq) (writeResult, error) {
	switch r.kind {
	case wTxn:
		resp, err := w.applyTxn(r.txn)
		var dbErr *dbError
		if errors.As(err, &dbErr) {
			return writeResult{}, dbErr.err
		}
		return writeResult{txn: resp, err: err}, nil
	case wCompact:
		switch {
		case r.rev > w.rev:
			return writeResult{err: ErrFutureRev}, nil
		case r.rev <= max(w.compactTo, w.s.RetainFloor()):
			return writeResult{err: ErrCompacted}, nil
		}
		w.compactTo = r.rev
		return writeResult{}, nil
	case wLeaseGrant:
		return w.grant(r.leaseID, r.ttl)
	case wLeaseRevoke, wLeaseExpire:
		if r.kind == wLeaseExpire && w.s.sh != nil {
			// Another replica may have renewed, revoked or expired it.
			if expired, err := w.s.sh.LeaseExpired(w.ctx, w.tx.tx, r.leaseID); err != nil || !expired {
				return writeResult{}, err
			}
		} else if r.kind == wLeaseExpire && !w.s.leases.isExpired(r.leaseID) {
			// Renewed while the expiry was queued.
			return writeResult{}, nil
		}
		return w.revoke(r.leaseID)
	}
	return writeResult{err: fmt.Errorf("unknown write kind %d", r.kind)}, nil
}

// sharedBatchTimeout bounds one write batch on a shared database.
const sharedBatchTimeout = 30 * time.Second

// commitUnknown is a failed COMMIT on a shared database: the transaction
// may or may not have committed.
type commitUnknown struct{ err error }

func (e *commitUnknown) Error() string {
	return "commit outcome unknown (the database connection failed during COMMIT): " + e.err.Error()
}
func (e *commitUnknown) Unwrap() error { return e.err }

// dbError marks a database failure inside request processing, as opposed
// to a request that etcd's rules refuse.
type dbError struct{ err error }

func (e *dbError) Error() string { return e.err.Error() }
func (e *dbError) Unwrap() error { return e.err }

func dbErr(err error) error {
	if err == nil {
		return nil
	}
	return &dbError{err: err}
}

// get returns the current row of key as this batch sees it.
func (w *writer) get(key []byte) (*row, error) {
	if r, ok := w.cache[string(key)]; ok {
		return r, nil
	}
	if c := w.s.cache.Load(); c != nil && !c.stale {
		// The committed state, as the batch's transaction would read it.
		kv := c.get(key)
		w.cache[string(key)] = kv
		return kv, nil
	}
	kv := &mvccpb.KeyValue{Key: key}
	err := w.tx.QueryRowContext(w.ctx, sqlGetCurrent, key).
		Scan(&kv.Value, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease)
	if errors.Is(err, sql.ErrNoRows) {
		w.cache[string(key)] = nil
		return nil, nil
	}
	if err != nil {
		return nil, dbErr(err)
	}
	w.cache[string(key)] = kv
	return kv, nil
}

// maxPendingBytes bounds what one WriteBatch statement carries.
const maxPendingBytes = 32 << 20

// markDirty records that key's current row changed (its new state is in
// w.cache, nil for deleted) and must be sent at the next flush.
func (w *writer) markDirty(key []byte) {
	if !w.isDirty[string(key)] {
		w.isDirty[string(key)] = true
		w.dirty = append(w.dirty, string(key))
	}
}

// flush sends the held-back writes of a shared-database batch; a no-op on
// SQLite, whose writes go out as they are made.
func (w *writer) flush() error {
	b := w.pend
	if b == nil {
		return nil
	}
	for _, k := range w.dirty {
		if kv := w.cache[k]; kv != nil {
			b.Put = append(b.Put, kv)
		} else {
			b.Delete = append(b.Delete, []byte(k))
		}
	}
	if b.empty() {
		return nil
	}
	b.UnixMs = w.unixMs
	err := w.s.sh.WriteBatch(w.ctx, w.tx.tx, b)
	*b = BatchWrites{Log: b.Log[:0], Put: b.Put[:0], Delete: b.Delete[:0]}
	w.pendBytes = 0
	w.dirty = w.dirty[:0]
	clear(w.isDirty)
	return err
}

// batchKeys lists, once each, the single keys a batch's transactions
// compare or put (nested ones too): the rows the writer will need.
func batchKeys(batch []*writeReq) [][]byte {
	seen := map[string]bool{}
	var keys [][]byte
	add := func(k []byte) {
		if len(k) > 0 && !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, k)
		}
	}
	var walk func(t *pb.TxnRequest)
	walk = func(t *pb.TxnRequest) {
		for _, c := range t.Compare {
			if len(c.RangeEnd) == 0 {
				add(c.Key)
			}
		}
		for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
			for _, op := range ops {
				switch v := op.Request.(type) {
				case *pb.RequestOp_RequestPut:
					if v.RequestPut != nil {
						add(v.RequestPut.Key)
					}
				case *pb.RequestOp_RequestTxn:
					if v.RequestTxn != nil {
						walk(v.RequestTxn)
					}
				}
			}
		}
	}
	for _, r := range batch {
		if r.kind == wTxn && r.txn != nil {
			walk(r.txn)
		}
	}
	return keys
}

// change is one request's pending revision: rev is taken when the request
// makes its first change, and every change in it shares that revision.
type change struct {
	rev int64
	sub int64
}

func (c *change) touched() bool { return c.sub > 0 }

func (w *writer) put(c *change, p *pb.PutRequest) (*pb.PutResponse, error) {
	prev, err := w.get(p.Key)
	if err != nil {
		return nil, err
	}
	kv := &mvccpb.KeyValue{Key: p.Key, Value: p.Value, Lease: p.Lease, ModRevision: c.rev, CreateRevision: c.rev, Version: 1}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
		if p.IgnoreValue {
			kv.Value = prev.Value
		}
		if p.IgnoreLease {
			kv.Lease = prev.Lease
		}
	}
	if kv.Value == nil {
		kv.Value = []byte{}
	}
	if w.pend != nil {
		w.pend.Log = append(w.pend.Log, LogRow{Rev: c.rev, Sub: c.sub, Key: kv.Key, Value: kv.Value,
			CreateRev: kv.CreateRevision, Version: kv.Version, Lease: kv.Lease})
		w.markDirty(kv.Key)
		w.pendBytes += 2 * (len(kv.Key) + len(kv.Value))
	} else {
		if _, err := w.tx.ExecContext(w.ctx, sqlInsertPut,
			c.rev, c.sub, kv.Key, kv.Value, kv.CreateRevision, kv.Version, kv.Lease, w.unixMs); err != nil {
			return nil, dbErr(err)
		}
		if _, err := w.tx.ExecContext(w.ctx, sqlUpsertCurrent,
			kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease); err != nil {
			return nil, dbErr(err)
		}
	}
	c.sub++
	w.cache[string(kv.Key)] = kv
	// PostgreSQL refuses a message over 1 GiB, and 512 requests of large
	// values would come close: a large batch goes out in parts (once
	// w.cache holds the row's new state, which flush sends).
	if w.pendBytes > maxPendingBytes {
		if err := w.flush(); err != nil {
			return nil, dbErr(err)
		}
	}
	w.events = append(w.events, &Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev, UnixMs: w.unixMs})
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: c.rev}}
	if p.PrevKv {
		resp.PrevKv = prev
	}
	return resp, nil
}

// deleteKeys removes the given current rows in revision c.
func (w *writer) deleteKeys(c *change, prevs []*row) error {
	for _, prev := range prevs {
		if w.pend != nil {
			w.pend.Log = append(w.pend.Log, LogRow{Rev: c.rev, Sub: c.sub, Key: prev.Key, Deleted: true})
			w.markDirty(prev.Key)
		} else {
			if _, err := w.tx.ExecContext(w.ctx, sqlInsertDelete,
				c.rev, c.sub, prev.Key, w.unixMs); err != nil {
				return dbErr(err)
			}
			if _, err := w.tx.ExecContext(w.ctx, sqlDeleteCurrent, prev.Key); err != nil {
				return dbErr(err)
			}
		}
		c.sub++
		w.cache[string(prev.Key)] = nil
		w.events = append(w.events, &Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: prev.Key, ModRevision: c.rev}, PrevKv: prev, UnixMs: w.unixMs})
	}
	return nil
}

func (w *writer) scanRows(query string, args ...any) ([]*row, error) {
	if err := w.flush(); err != nil {
		return nil, dbErr(err)
	}
	rows, err := w.tx.QueryContext(w.ctx, query, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []*row
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		if err := rows.Scan(&kv.Key, &kv.Value, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease); err != nil {
			return nil, dbErr(err)
		}
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		out = append(out, kv)
	}
	return out, dbErr(rows.Err())
}

func (w *writer) deleteRange(c *change, d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	kr := NewKeyRange(d.Key, d.RangeEnd)
	var prevs []*row
	switch {
	case kr.Single():
		// kube-apiserver's delete: the writer's own row reader (the batch's
		// changes, then the cache or the database) answers it without a
		// scan, and without sending a Postgres batch's held-back writes.
		prev, err := w.get(kr.Key)
		if err != nil {
			return nil, err
		}
		if prev != nil {
			prevs = []*row{prev}
		}
	case !kr.Empty():
		cond, args := w.s.q.where("key", kr, nil)
		var err error
		prevs, err = w.scanRows(`SELECT key, value, create_rev, mod_rev, version, lease FROM current WHERE `+cond+` ORDER BY key`, args...)
		if err != nil {
			return nil, err
		}
	}
	if err := w.deleteKeys(c, prevs); err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{Revision: c.headerRev(w.rev)}, Deleted: int64(len(prevs))}
	if d.PrevKv {
		resp.PrevKvs = prevs
	}
	return resp, nil
}

// headerRev is the revision a response inside the request reports: the new
// one once the request has changed something, the old one before.
func (c *change) headerRev(old int64) int64 {
	if c.touched() {
		return c.rev
	}
	return old
}

// MinLeaseTTL is etcd's floor for a lease's TTL with default timings.
const MinLeaseTTL = 2

// MaxLeaseTTL is etcd's ceiling (9,000,000,000 s).
const MaxLeaseTTL = 9_000_000_000

func (w *writer) leaseExists(id int64) (bool, error) {
	if _, ok := w.granted[id]; ok {
		return true, nil
	}
	if w.revoked[id] {
		return false, nil
	}
	var one int
	err := w.tx.QueryRowContext(w.ctx, sqlLeaseExists, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, dbErr(err)
}

func (w *writer) grant(id, ttl int64) (writeResult, error) {
	if ttl > MaxLeaseTTL {
		return writeResult{err: ErrLeaseTTLTooBig}, nil
	}
	ttl = max(ttl, MinLeaseTTL)
	if id == 0 {
		for {
			id = randomID()
			ok, err := w.leaseExists(id)
			if err != nil {
				return writeResult{}, err
			}
			if id != 0 && !ok {
				break
			}
		}
	} else if ok, err := w.leaseExists(id); err != nil {
		return writeResult{}, err
	} else if ok {
		return writeResult{err: ErrLeaseExists}, nil
	}
	if _, err := w.tx.ExecContext(w.ctx, `INSERT INTO leases (id, ttl) VALUES (?, ?)`, id, ttl); err != nil {
		return writeResult{}, err
	}
	w.granted[id] = ttl
	delete(w.revoked, id)
	return writeResult{leaseID: id, ttl: ttl}, nil
}

// revoke deletes every key attached to the lease in one revision.
func (w *writer) revoke(id int64) (writeResult, error) {
	ok, err := w.leaseExists(id)
	if err != nil {
		return writeResult{}, unwrapDB(err)
	}
	if !ok {
		return writeResult{err: ErrLeaseNotFound}, nil
	}
	prevs, err := w.scanRows(`SELECT key, value, create_rev, mod_rev, version, lease FROM current WHERE lease = ? ORDER BY key`, id)
	if err != nil {
		return writeResult{}, unwrapDB(err)
	}
	// Rows this batch already re-put without the lease must not go.
	live := prevs[:0]
	for _, p := range prevs {
		if c, ok := w.cache[string(p.Key)]; ok && (c == nil || c.Lease != id) {
			continue
		}
		live = append(live, p)
	}
	c := &change{rev: w.rev + 1}
	if err := w.deleteKeys(c, live); err != nil {
		return writeResult{}, unwrapDB(err)
	}
	if c.touched() {
		w.rev = c.rev
	}
	if _, err := w.tx.ExecContext(w.ctx, `DELETE FROM leases WHERE id = ?`, id); err != nil {
		return writeResult{}, err
	}
	delete(w.granted, id)
	w.revoked[id] = true
	return writeResult{}, nil
}

func unwrapDB(err error) error {
	var d *dbError
	if errors.As(err, &d) {
		return d.err
	}
	return err
}

// Compact records the floor below which the etcd API answers ErrCompacted.
// History itself stays until retention prunes it.
func (s *Store) Compact(ctx context.Context, rev int64) (int64, error) {
	res := s.submit(ctx, &writeReq{kind: wCompact, rev: rev})
	return res.rev, res.err
}

// LeaseGrant creates a lease; id 0 lets the store choose one.
func (s *Store) LeaseGrant(ctx context.Context, id, ttl int64) (int64, int64, int64, error) {
	res := s.submit(ctx, &writeReq{kind: wLeaseGrant, leaseID: id, ttl: ttl})
	return res.leaseID, res.ttl, res.rev, res.err
}

// LeaseRevoke deletes the lease and every key attached to it.
func (s *Store) LeaseRevoke(ctx context.Context, id int64) (int64, error) {
	res := s.submit(ctx, &writeReq{kind: wLeaseRevoke, leaseID: id})
	return res.rev, res.err
}

// Defragment returns free pages to the file system.
func (s *Store) Defragment(ctx context.Context) error {
	return s.submit(ctx, &writeReq{kind: wDefrag}).err
}

// Txn applies a transaction (Put and DeleteRange arrive as one-op Txns).
func (s *Store) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	res := s.submit(ctx, &writeReq{kind: wTxn, txn: r})
	if res.err != nil {
		return nil, res.err
	}
	if res.txn.Header == nil {
		res.txn.Header = &pb.ResponseHeader{}
	}
	return res.txn, nil
}

func (s *Store) expireLeases() {
	s.every(s.opts.LeaseCheckInterval, func(ctx context.Context) {
		for _, id := range s.leases.expired() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			res := s.submit(ctx, &writeReq{kind: wLeaseExpire, leaseID: id})
			cancel()
			if res.err != nil && !errors.Is(res.err, ErrLeaseNotFound) && !errors.Is(res.err, ErrClosed) && !errors.Is(res.err, context.Canceled) {
				s.log.Warn("lease expiry failed; will retry", "lease", id, "err", res.err)
			}
		}
	})
}

// every runs f each interval until the store closes; f's context ends
// when it does.
func (s *Store) every(interval time.Duration, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}
