package mvcc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The writer is the single goroutine that changes the database (ADR-002).
// Each batch of queued requests is one SQL transaction and one durable
// commit; every request in it gets its own revision and compare outcome
// and sees the requests before it. Nobody is answered before the commit,
// and the batch is published (publish.go) after the commit and before the
// answers, so an acknowledged write is both durable and visible to every
// reader and watcher.
//
// Most of what differs between databases stays behind two interfaces
// chosen when the store opens: a batcher opens each batch's transaction
// (batch.go), and a publisher makes a committed batch visible (publish.go,
// tail.go). One branch remains here: with replicas, a batch's revisions
// are noted for the reads that wait on them (index_replica.go).

type writeKind int

const (
	wTxn writeKind = iota
	wCompact
	wLeaseGrant
	wLeaseRevoke
	wLeaseExpire
	wDefrag
	wPing // CheckWriter's: no write, answered after the batch it came in
)

type writeReq struct {
	ctx   context.Context // the caller's
	kind  writeKind
	txn   *pb.TxnRequest
	rev   int64 // Compact
	lease LeaseGrant
	done  chan writeResult
}

type writeResult struct {
	txn   *pb.TxnResponse
	rev   int64 // the store's revision after this request
	lease Lease
	err   error
}

// submit queues a request for the writer and waits for its durable outcome.
// A caller that gives up (ctx) may still see its write committed, as with
// etcd, if its batch had begun; one still queued then is not applied
// (process).
func (s *Store) submit(ctx context.Context, req *writeReq) writeResult {
	if s.closed.Load() {
		return writeResult{err: ErrClosed}
	}
	req.ctx = ctx
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

type writer struct {
	s       *Store
	b       batcher
	pub     publisher
	timeout time.Duration // bounds one batch; 0: none

	// The writer's heartbeat, which liveness reads without waiting for the
	// writer (CheckWriterAlive): beat is when it last made progress (time
	// since born: monotonic), inDB is set while it runs a batch's
	// transaction (its evaluation in Go included) or otherwise waits on the
	// database; liveness does not judge those, readiness does.
	born time.Time
	beat atomic.Int64
	inDB atomic.Bool
}

// writerBeat is how often an idle writer shows it is alive.
const writerBeat = time.Second

// writerStall is how long the writer may show no progress outside the
// database before liveness fails.
const writerStall = 10 * time.Second

// alive records progress.
func (w *writer) alive() { w.beat.Store(int64(time.Since(w.born))) }

// enterDB and leaveDB bracket a wait on the database.
func (w *writer) enterDB() { w.inDB.Store(true) }

func (w *writer) leaveDB() {
	w.inDB.Store(false)
	w.alive()
}

func (w *writer) run() {
	defer close(w.s.done)
	batch := make([]*writeReq, 0, w.s.opts.MaxBatch)
	idle := time.NewTicker(writerBeat)
	defer idle.Stop()
	for {
		w.alive()
		var first *writeReq
		select {
		case first = <-w.s.reqs:
		case <-idle.C:
			continue
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
//
// A request whose caller gave up while it was queued is answered with the
// caller's error and not applied: nobody waits for its outcome. Otherwise
// a writer held up (a database failing over, a slow disk) would apply,
// once it resumes, every request its callers had long abandoned and
// probably sent again, seconds after they stopped waiting; each a write
// whose outcome the caller could not know.
func (w *writer) process(batch []*writeReq) {
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- writeResult{err: err}
			continue
		}
		live = append(live, r)
	}
	batch = live
	// Defragment cannot run inside a transaction: give it a batch of its own.
	for i, r := range batch {
		if r.kind == wDefrag {
			w.process(batch[:i])
			w.enterDB()
			err := w.s.d.Defragment(context.Background(), w.s.wdb)
			w.leaveDB()
			r.done <- writeResult{rev: w.s.Rev(), err: err}
			w.process(batch[i+1:])
			return
		}
	}
	if len(batch) == 0 {
		return
	}
	for i, r := range batch {
		if r.kind == wPing {
			// The rest of the batch first; copied, since run reuses batch.
			rest := append(append([]*writeReq(nil), batch[:i]...), batch[i+1:]...)
			w.process(rest)
			r.done <- writeResult{rev: w.s.Rev()}
			return
		}
	}
	start := time.Now()
	results, err := w.commit(batch)
	metrics.WriteBatchSize.Observe(float64(len(batch)))
	metrics.CommitSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		metrics.CommitFailures.Inc()
	}
	var unknown *errCommitUnknown
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

// commit applies a batch in one transaction and publishes it.
func (w *writer) commit(reqs []*writeReq) ([]writeResult, error) {
	ctx := context.Background()
	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	c, results, err := w.transact(ctx, reqs)
	if errors.Is(err, ErrAssumption) {
		// The batch assumed what the database no longer held and wrote
		// nothing (batch_replica_assume.go): again, reading it this time.
		c, results, err = w.transact(ctx, reqs)
	}
	if reg := (*regressedError)(nil); errors.As(err, &reg) {
		// The database lost revisions this process handed out; the batch
		// wrote nothing. Once the database is past them (regress.go), the
		// batch runs again from there.
		w.enterDB()
		err = w.s.followLoss()
		w.leaveDB()
		if err != nil {
			return nil, err
		}
		c, results, err = w.transact(ctx, reqs)
	}
	if err != nil {
		return nil, err
	}
	if r := w.s.replica; r != nil {
		if c.rev != c.startRev {
			// Reads waiting for these revisions leave them to this publish
			// rather than wake the tailer (index_replica.go). A batch that
			// took none read the database's revision, which may be another
			// replica's: that one is the tailer's.
			storeMax(&r.ownRev, c.rev)
		}
		// The tailer may read back what other replicas committed before
		// this batch, or hold the publisher while it reads: a wait on the
		// database too.
		w.enterDB()
		defer w.leaveDB()
	}
	w.pub.published(c)
	return results, nil
}

// transact runs a batch's transaction, to its COMMIT: the writer waits on
// the database meanwhile.
func (w *writer) transact(ctx context.Context, reqs []*writeReq) (*batchCommit, []writeResult, error) {
	w.enterDB()
	defer w.leaveDB()
	tx, start, err := w.b.begin(ctx, reqs)
	if err != nil {
		return nil, nil, err
	}
	b := &batch{
		ctx: ctx, tx: tx, s: w.s,
		rev: start.Rev, compact: start.Compact,
		// Time never runs backwards in the log, so revision order and time
		// order agree even when the wall clock steps back.
		unixMs:  max(w.s.opts.Now().UnixMilli(), start.LastUnixMs),
		granted: map[int64]int64{}, revoked: map[int64]bool{},
	}
	results := make([]writeResult, len(reqs))
	for i, r := range reqs {
		res, err := b.apply(r)
		if err != nil {
			tx.rollback()
			return nil, nil, err
		}
		res.rev = b.rev
		results[i] = res
	}
	end := batchEnd{start: start, rev: b.rev, compact: b.compact, unixMs: b.unixMs, leases: len(b.granted)+len(b.revoked) > 0, changes: len(b.events)}
	if err := tx.commit(end); err != nil {
		return nil, nil, err
	}
	return &batchCommit{
		startRev: start.Rev, rev: b.rev, compact: b.compact,
		events: b.events, granted: b.granted, revoked: b.revoked,
	}, results, nil
}

// apply runs one request inside the batch. A refusal is the request's own
// result and changed nothing; any other error is a failure of the
// database that aborts the batch.
func (b *batch) apply(r *writeReq) (writeResult, error) {
	var res writeResult
	var err error
	switch r.kind {
	case wTxn:
		res.txn, err = b.txn(r.txn)
	case wCompact:
		err = b.compactTo(r.rev)
	case wLeaseGrant:
		res.lease, err = b.grant(r.lease)
	case wLeaseRevoke:
		err = b.revoke(r.lease.ID)
	case wLeaseExpire:
		err = b.expire(r.lease.ID)
	default:
		err = fmt.Errorf("unknown write kind %d", r.kind)
	}
	if Refused(err) {
		return writeResult{err: err}, nil
	}
	return res, err
}

// compactTo moves Compact's floor (committed with the batch).
func (b *batch) compactTo(rev int64) error {
	floor := b.floor()
	switch {
	case rev > b.rev:
		return ErrFutureRev
	case rev == 0 && floor == 0:
		// etcd's floor starts below 0 and Compact(0) succeeds, once; here
		// 0 is both "never compacted" and "compacted at 0", so every
		// Compact(0) before the first real one succeeds and changes
		// nothing.
		return nil
	case rev <= floor:
		return ErrCompacted
	}
	b.compact = rev
	return nil
}

// Txn applies a transaction (Put and DeleteRange arrive as one-op Txns).
func (s *Store) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	res := s.submit(ctx, &writeReq{kind: wTxn, txn: r})
	if res.err != nil {
		return nil, res.err
	}
	return res.txn, nil
}

// Compact records the floor below which the etcd API answers ErrCompacted.
// History itself stays until retention prunes it.
func (s *Store) Compact(ctx context.Context, rev int64) (int64, error) {
	res := s.submit(ctx, &writeReq{kind: wCompact, rev: rev})
	return res.rev, res.err
}

// Defragment runs the dialect's Defragment in a batch of its own.
func (s *Store) Defragment(ctx context.Context) error {
	return s.submit(ctx, &writeReq{kind: wDefrag}).err
}
