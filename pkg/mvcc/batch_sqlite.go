package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The SQLite batch writes each row as it is made, through statements
// prepared once on the writer's connection: with the database in this
// process (SQLite) a statement costs microseconds, not a round trip. This
// process is the database's only writer, so the batcher starts each batch
// from the state the previous one left, and the writer's reads of current
// rows come from the live index when it serves, or else from one read of
// every key the batch names, before its first request.

// The batch's statements (BatchSQL, CurrentSQL's and LeaseSQL's) are
// prepared once on the writer's one connection, when the store opens
// (stmt.go). Without a live index, a batch reads the current rows of the
// keys it names before its first request, in statements of
// PrefetchSizes keys (BatchSQL.Prefetch): its keys in statements of the
// largest, and the rest in the smallest that holds them (the last key
// repeated to fill it). One statement replaces a statement per key, and
// SQLite seeks the keys in order.

type sqliteBatcher struct {
	s    *Store
	last BatchStart // what the previous batch committed
	// uncertain is set when a commit failed: it may still have taken
	// effect, so the next batch reads its start from the database and
	// reloads the live index.
	uncertain bool

	// After a batch that wrote a large log (bulk), the WAL is copied into
	// the database by a background checkpoint on a reader's connection,
	// not by the writer's connection in its commit: the batch is answered
	// without waiting for that copy, and so are the batches after it.
	// ckptOff: the writer's connection does not checkpoint; ckpt is closed
	// when the background checkpoint ends; ckptAgain: another bulk batch
	// committed meanwhile, whose log that checkpoint may have missed.
	ckptOff   bool
	ckpt      chan struct{}
	ckptAgain bool

	// Ordinary commits are copied by a background checkpoint too, at most
	// one at a time, at most one per checkpointEvery (tick is closed when it
	// ends, tickAt is when it started), so that the writer's connection,
	// which still checkpoints after a commit that leaves the WAL over its
	// threshold, finds little left to copy. That one is still needed: the
	// WAL starts over only when a write finds all of it copied, which a
	// checkpoint racing the writer's commits never leaves behind.
	tick   chan struct{}
	tickAt time.Time
	// uncopied counts the changes committed since the last background
	// checkpoint started.
	uncopied int

	// rowReads counts the current rows read one at a time, which a batch
	// without a live index should not need (tests).
	rowReads atomic.Int64
}

// checkpointEvery spaces the background checkpoints by the load, read
// from the size of the batch that just committed (ADR-015).
//
// Each checkpoint syncs the database file, and while it does, the
// writer's commits wait longer for their own sync of the WAL: the more it
// copies, the longer. Under a light load (small batches) the writer has
// CPU to spare, so checkpoints closer together keep each copy, and each
// commit's wait behind it, short. Under a heavy load (batches of tens of
// changes) the CPU is the limit, and a checkpoint copies the pages many
// batches rewrote (the end of the log, the indexes' last leaves) once for
// all of them. A fixed 10 ms cost the 64-client table 7%; a fixed 50 ms
// left update p99 at 10^6 retained revisions 1.11-1.38x that at 10^4,
// and about a fifth higher than this rule does; a 10 ms floor raised p99
// at 10^4 and update p50 7-19%, and 20 ms did neither
// (docs/benchmarks/checkpoints-and-update-p99.md, ADR-015).
// The batch that commits decides, so under a load of mixed sizes a small
// batch brings the next checkpoint closer.
func checkpointEvery(changes int) time.Duration {
	return min(max(time.Duration(changes)*checkpointPerChange, checkpointMin), checkpointMax)
}

const (
	checkpointPerChange = 2 * time.Millisecond
	checkpointMin       = 20 * time.Millisecond
	checkpointMax       = 50 * time.Millisecond
)

// A background checkpoint also waits for checkpointChanges changes to copy,
// or for checkpointLongest to pass. Each one syncs the database file: at a
// steady 50 updates/s, one per commit doubled the syncs and the server's CPU
// per update went mostly to them and to the runtime waking around them
// (docs/benchmarks/steady-rate-cpu.md). Under the loads checkpointEvery was
// tuned for, this many changes commit within its 20 ms, and it alone
// decides. 32 changes of 2 KiB values are about 200 WAL pages: the copy, and
// the sync the writer's commits wait behind, stay small.
const (
	checkpointChanges = 32
	checkpointLongest = time.Second
)

// bulkBytes is how many bytes of deleted rows make a batch bulk: their
// pages are rewritten into the WAL, well beyond what the writer's
// connection checkpoints after an ordinary commit.
const bulkBytes = 16 << 20

func newSQLiteBatcher(s *Store, st BatchStart) *sqliteBatcher {
	return &sqliteBatcher{s: s, last: st, tickAt: s.opts.Now()}
}

func (b *sqliteBatcher) begin(ctx context.Context, reqs []*writeReq) (batchTx, BatchStart, error) {
	sqltx, err := b.s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return nil, BatchStart{}, err
	}
	tx := &sqliteTx{b: b, ctx: ctx, tx: prepTx{tx: sqltx, p: b.s.wstmts, local: map[string]*sql.Stmt{}}, rows: staged{}, index: b.s.index.Load()}
	if err := b.resumeCheckpoints(ctx, tx.tx); err != nil {
		sqltx.Rollback()
		return nil, BatchStart{}, err
	}
	start := b.last
	if b.uncertain {
		if err := tx.tx.QueryRowContext(ctx, b.s.sql.Batch.Start).Scan(&start.Rev, &start.Compact, &start.LastUnixMs); err != nil {
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
	if tx.index == nil {
		if err := tx.prefetch(batchKeys(reqs)); err != nil {
			sqltx.Rollback()
			return nil, BatchStart{}, err
		}
	}
	return tx, start, nil
}

// prefetch reads the current rows of keys, before the batch writes
// anything, so that get answers them without a statement each.
func (t *sqliteTx) prefetch(keys [][]byte) error {
	for len(keys) > 0 {
		i := len(PrefetchSizes) - 1
		for j, size := range PrefetchSizes {
			if size >= len(keys) {
				i = j
				break
			}
		}
		n := PrefetchSizes[i]
		chunk := keys[:min(n, len(keys))]
		keys = keys[len(chunk):]
		args := make([]any, n)
		for j := range args {
			args[j] = chunk[min(j, len(chunk)-1)]
		}
		for _, k := range chunk {
			t.rows[string(k)] = nil
		}
		err := eachCurrent(t.ctx, t.tx, t.b.s.sql.Batch.Prefetch[i], args, func(kv *mvccpb.KeyValue) bool {
			t.rows[string(kv.Key)] = kv
			return true
		})
		if err != nil {
			return fmt.Errorf("read the batch's current rows: %w", err)
		}
	}
	return nil
}

type sqliteTx struct {
	b     *sqliteBatcher
	ctx   context.Context
	tx    prepTx
	rows  staged
	index *liveIndex // nil: current rows come from SQL
	bulk  int64      // bytes of the rows its range deletes removed
	// gone is the ranges of goneMin keys or more this batch deleted (with
	// the live index only): a key in one that rows does not hold is
	// deleted, whatever the index says. A delete of 200,000 keys would
	// otherwise add each to rows, a string and a map entry per key.
	gone []KeyRange
}

// resumeCheckpoints runs at the start of a batch, on the writer's
// connection (ex): once the background checkpoint has ended, another
// starts if a bulk batch committed while it ran, or else the connection
// checkpoints after its commits again.
func (b *sqliteBatcher) resumeCheckpoints(ctx context.Context, ex Execer) error {
	if !b.ckptOff {
		return nil
	}
	if b.ckpt != nil {
		select {
		case <-b.ckpt:
		default:
			return nil
		}
	}
	if b.ckptAgain {
		b.ckptAgain = false
		b.checkpointBehind()
		return nil
	}
	if err := b.s.d.(Checkpointer).AutoCheckpoint(ctx, ex, true); err != nil {
		return err
	}
	b.ckptOff, b.ckpt = false, nil
	return nil
}

// checkpointBehind starts the background checkpoint. It waits for the
// periodic one (tick) if that still runs: SQLite lets one checkpoint run at
// a time and answers a passive one that finds another running with "busy"
// at once, copying nothing, and the writer's connection would then copy
// the bulk batch's whole log inside a later commit.
func (b *sqliteBatcher) checkpointBehind() {
	b.ckpt = b.checkpointAsync(b.tick)
}

// checkpointSoon starts a background checkpoint after an ordinary commit,
// unless one is running, the last one started less than
// checkpointEvery(changes) ago (changes being the batch's), or fewer than
// checkpointChanges changes have committed since, for less than
// checkpointLongest.
func (b *sqliteBatcher) checkpointSoon(changes int) {
	b.uncopied += changes
	if b.tick != nil {
		select {
		case <-b.tick:
		default:
			return
		}
	}
	now := b.s.opts.Now()
	since := now.Sub(b.tickAt)
	if since >= checkpointEvery(changes) && (b.uncopied >= checkpointChanges || since >= checkpointLongest) {
		b.tickAt, b.uncopied = now, 0
		b.tick = b.checkpointAsync(nil)
	}
}

// checkpointAsync checkpoints on a reader's connection once after (if not
// nil) is closed; the channel it returns is closed when it has ended.
func (b *sqliteBatcher) checkpointAsync(after <-chan struct{}) chan struct{} {
	done := make(chan struct{})
	b.s.background.Go(func() {
		defer close(done)
		// A checkpoint that fails leaves the WAL to the next one: the
		// writer's connection checkpoints after its commits again. One
		// that Close cancels leaves it to the last connection's close.
		ctx := b.s.bgCtx
		if after != nil {
			select {
			case <-after:
			case <-ctx.Done():
				return
			}
		}
		if err := b.s.d.(Checkpointer).Checkpoint(ctx, b.s.rdb); err != nil && ctx.Err() == nil {
			b.s.log.Warn("background checkpoint failed", "err", err)
		}
	})
	return done
}

func (t *sqliteTx) q() querier { return t.tx }

func (t *sqliteTx) get(key []byte) (*mvccpb.KeyValue, error) {
	if kv, ok := t.rows[string(key)]; ok {
		return kv, nil
	}
	if t.index != nil {
		if t.goneByRange(key) {
			return nil, nil
		}
		// The committed state, as the transaction would read it.
		kv, err := rowOf(t.ctx, t.tx, &t.b.s.sql.Current, t.index.get(key))
		if err != nil {
			if errors.Is(err, errOutOfStep) {
				t.outOfStep(err)
			}
			return nil, err
		}
		t.rows[string(key)] = kv
		return kv, nil
	}
	t.b.rowReads.Add(1)
	kv, err := getCurrent(t.ctx, t.tx, &t.b.s.sql.Current, key)
	if err == nil {
		t.rows[string(key)] = kv
	}
	return kv, err
}

func (t *sqliteTx) scan(kr KeyRange, lease int64) ([]*mvccpb.KeyValue, error) {
	// The transaction sees this batch's writes: they went out as made.
	return scanCurrent(t.ctx, t.tx, &t.b.s.sql.Current, kr, lease)
}

func (t *sqliteTx) put(kv *mvccpb.KeyValue, sub, unixMs int64) error {
	if _, err := t.tx.ExecContext(t.ctx, t.b.s.sql.Batch.InsertPut,
		kv.ModRevision, sub, kv.Key, kv.Value, kv.CreateRevision, kv.Version, kv.Lease, unixMs); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(t.ctx, t.b.s.sql.Batch.UpsertCurrent,
		kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease); err != nil {
		return err
	}
	t.rows[string(kv.Key)] = kv
	return nil
}

func (t *sqliteTx) del(key []byte, rev, sub, unixMs int64) error {
	if _, err := t.tx.ExecContext(t.ctx, t.b.s.sql.Batch.InsertDelete, rev, sub, key, unixMs); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(t.ctx, t.b.s.sql.Batch.DeleteCurrent, key); err != nil {
		return err
	}
	t.rows[string(key)] = nil
	return nil
}

func (t *sqliteTx) flush() error { return nil }

func (t *sqliteTx) leaseExpired(id int64) (bool, error) {
	// Deadlines live in this process's memory (lease.go).
	return t.b.s.leases.isExpired(id), nil
}

func (t *sqliteTx) commit(end batchEnd) error {
	fail := func(err error) error {
		t.tx.tx.Rollback()
		return err
	}
	if end.rev != end.start.Rev {
		if _, err := t.tx.ExecContext(t.ctx, t.b.s.sql.Batch.SetRev, end.rev); err != nil {
			return fail(err)
		}
		if _, err := t.tx.ExecContext(t.ctx, t.b.s.sql.Batch.SetLastUnixMs, end.unixMs); err != nil {
			return fail(err)
		}
	}
	if end.compact != end.start.Compact {
		if _, err := t.tx.ExecContext(t.ctx, t.b.s.sql.Batch.SetCompact, end.compact); err != nil {
			return fail(err)
		}
	}
	_, checkpointer := t.b.s.d.(Checkpointer)
	background := checkpointer && t.bulk >= bulkBytes
	if background && !t.b.ckptOff {
		if err := t.b.s.d.(Checkpointer).AutoCheckpoint(t.ctx, t.tx, false); err != nil {
			return fail(err)
		}
		t.b.ckptOff = true
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
	switch {
	case background && t.b.ckpt == nil:
		t.b.checkpointBehind()
	case background:
		t.b.ckptAgain = true
	case !t.b.ckptOff && checkpointer && end.changes > 0:
		// A batch that changed no key (a lease grant, a compaction, a
		// compare that failed) wrote next to nothing to copy, and says
		// nothing of the load: the next batch with changes decides.
		t.b.checkpointSoon(end.changes)
	}
	t.b.last = end.next(0)
	return nil
}

func (t *sqliteTx) rollback() { t.tx.tx.Rollback() }
