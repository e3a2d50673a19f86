package mvcc

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Shared is implemented by dialects whose database several QuantyKube
// processes (replicas) may write at once, such as PostgreSQL. The core then
// stops trusting its in-memory revision between batches:
//
//   - every write batch starts with LockBatch, which takes the database-wide
//     write lock (held until the batch commits) and reads the committed
//     revision, compact floor and last batch time, so revisions are assigned
//     in commit order across replicas with no holes;
//   - every batch that changes something calls Notify inside its transaction,
//     which wakes the other replicas at commit;
//   - a tailer goroutine feeds the Hub from the log table in revision order,
//     woken by Listen and by a slow poll, and follows the compact floor and
//     the lease table;
//   - lease renewals and expiry go through the database, so they agree
//     across replicas.
//
// SQLite does not implement it and keeps its single-process fast path.
type Shared interface {
	// LockMigrate serializes schema migration between processes starting at
	// once; it runs first in the migration transaction.
	LockMigrate(ctx context.Context, tx *sql.Tx) error
	// LockBatch runs first in every write transaction. It also returns the
	// current rows of keys (absent keys are left out): the batch's point
	// reads, fetched in the statement that reads the committed state, so
	// that compares cost no round trip each.
	LockBatch(ctx context.Context, tx *sql.Tx, keys [][]byte) (BatchStart, []*mvccpb.KeyValue, error)
	// WriteBatch applies w inside the batch's transaction, in as few round
	// trips as the database allows (the writer calls it once per batch, and
	// before any read of its own writes).
	WriteBatch(ctx context.Context, tx *sql.Tx, w *BatchWrites) error
	// Notify wakes the other replicas (at commit when ex is a transaction);
	// payload identifies the sender and what changed.
	Notify(ctx context.Context, ex Execer, payload string) error
	// Listen calls wake for every notification (and once after every
	// (re)connection) until ctx ends, reconnecting with backoff.
	Listen(ctx context.Context, wake func(payload string))
	// Leases reads every lease with the milliseconds it has left.
	Leases(ctx context.Context, db *sql.DB) ([]LeaseRow, error)
	// RenewLease restarts a lease's TTL in the database; ok is false when
	// the lease does not exist or has already expired.
	RenewLease(ctx context.Context, db *sql.DB, id int64) (ttl int64, ok bool, err error)
	// LeaseExpired locks the lease's row inside the writer's transaction and
	// reports whether it exists and its deadline has passed.
	LeaseExpired(ctx context.Context, tx *sql.Tx, id int64) (bool, error)
}

// BatchStart is the committed state a write batch starts from.
type BatchStart struct {
	Rev, Compact, LastUnixMs int64
}

// BatchWrites is what a write batch on a shared database changes, held
// back until the batch commits or reads its own writes: one statement
// instead of a round trip per row.
type BatchWrites struct {
	UnixMs int64    // every log row's commit time
	Log    []LogRow // in (rev, sub) order
	// Put and Delete are the final state of each current row the writes
	// changed; a key is in at most one of them.
	Put    []*mvccpb.KeyValue
	Delete [][]byte
	// SetRev writes Rev and LastUnixMs (= UnixMs) to meta; SetCompact
	// writes Compact.
	SetRev     bool
	Rev        int64
	SetCompact bool
	Compact    int64
	// Notify, when not empty, is sent to the other replicas at commit.
	Notify string
}

// empty reports whether there is nothing to send.
func (w *BatchWrites) empty() bool {
	return len(w.Log) == 0 && len(w.Put) == 0 && len(w.Delete) == 0 && !w.SetRev && !w.SetCompact && w.Notify == ""
}

// LogRow is one row of the log table (Value nil on a delete).
type LogRow struct {
	Rev, Sub                  int64
	Key, Value                []byte
	CreateRev, Version, Lease int64
	Deleted                   bool
}

// LeaseRow is one persisted lease.
type LeaseRow struct {
	ID, TTL, RemainingMs int64
}

// Notification payloads: the sender's instance ID, then what changed.
const (
	notifyRev   = "r" // new revisions (or a new compact floor)
	notifyLease = "l" // a lease was granted, revoked or renewed
)

// tailer feeds the Hub from the log table on shared databases. mu orders
// every publication and every change of the in-memory lease table, whether
// it comes from this replica's writer or from the database.
type tailer struct {
	s        *Store
	sh       Shared
	instance string
	mu       sync.Mutex
	wake     chan struct{}
	leasesCh chan struct{}
	stop     context.CancelFunc
	done     chan struct{}
}

// tailMetaSQL reads the committed revision and Compact's floor.
const tailMetaSQL = `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact')`

// tailStep bounds how many revisions one read of the log brings in.
const tailStep = 1000

// tailPoll is the safety net when a notification is lost.
const tailPoll = time.Second

func newTailer(s *Store, sh Shared) *tailer {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &tailer{s: s, sh: sh, instance: hex.EncodeToString(b[:]),
		wake: make(chan struct{}, 1), leasesCh: make(chan struct{}, 1), done: make(chan struct{})}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (t *tailer) start() {
	ctx, cancel := context.WithCancel(context.Background())
	t.stop = cancel
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		t.sh.Listen(ctx, func(payload string) {
			if len(payload) > len(t.instance) && payload[:len(t.instance)] == t.instance {
				return // our own commit: already published by the writer
			}
			if len(payload) == 0 || payload[len(payload)-1:] != notifyRev {
				poke(t.leasesCh)
			}
			poke(t.wake)
		})
	}()
	go func() {
		defer close(t.done)
		defer func() { <-listenDone }()
		t.run(ctx)
	}()
}

func (t *tailer) close() {
	t.stop()
	<-t.done
}

func (t *tailer) run(ctx context.Context) {
	tick := time.NewTicker(tailPoll)
	defer tick.Stop()
	var lastErr time.Time
	for {
		leases, polled := false, false
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-t.leasesCh:
			leases = true
		case <-tick.C:
			leases, polled = true, true
		}
		select {
		case <-t.leasesCh:
			leases = true
		default:
		}
		err := t.catchUp(ctx)
		if err == nil && leases {
			err = t.syncLeases(ctx)
		}
		if err == nil && polled {
			// Pruning by another replica sends no notification.
			err = t.s.syncFloors(ctx)
		}
		if err != nil && ctx.Err() == nil && time.Since(lastErr) > 5*time.Second {
			lastErr = time.Now()
			t.s.log.Warn("following the database failed; retrying", "err", err)
		}
	}
}

// catchUp publishes every committed revision the Hub lacks, in order.
func (t *tailer) catchUp(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.catchUpLocked(ctx)
}

func (t *tailer) catchUpLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rev, compact int64
	if err := t.s.rdb.QueryRowContext(ctx, tailMetaSQL).Scan(&rev, &compact); err != nil {
		return err
	}
	storeMax(&t.s.compact, compact)
	all := KeyRange{Key: []byte{}, Unbounded: true}
	for {
		have, _, _ := t.s.hub.State()
		if have >= rev {
			break
		}
		// Every revision <= rev committed before meta said rev (the batch
		// lock orders commits), so any later read sees all of them.
		to := min(rev, have+tailStep)
		evs, err := t.s.eventsFromLog(ctx, have+1, to, all)
		if err != nil {
			return err
		}
		t.s.hub.publish(to, evs)
	}
	storeMax(&t.s.committed, rev)
	return nil
}

// published is called by the writer after its batch (startRev, rev]
// committed: its own events go straight to the Hub when nothing from other
// replicas is missing before them; otherwise the gap and the batch are read
// back from the log. Lease changes are applied under the same lock, so a
// concurrent lease sync cannot undo them.
func (t *tailer) published(startRev, rev, compact int64, evs []*Event, apply func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	apply()
	storeMax(&t.s.compact, compact)
	if rev == startRev {
		return
	}
	have, _, _ := t.s.hub.State()
	switch {
	case have >= rev:
		// The tailer already read it back.
	case have == startRev:
		t.s.hub.publish(rev, evs)
		storeMax(&t.s.committed, rev)
	default:
		if err := t.catchUpLocked(context.Background()); err != nil {
			// The tailer will publish it once the database answers.
			t.s.log.Warn("reading back a committed batch failed; the tailer will retry", "err", err)
			poke(t.wake)
		}
	}
}

// syncLeases makes the in-memory lease table the database's.
func (t *tailer) syncLeases(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := t.sh.Leases(ctx, t.s.rdb)
	if err != nil {
		return err
	}
	t.s.leases.replace(rows)
	return nil
}

func storeMax(v interface {
	Load() int64
	CompareAndSwap(old, new int64) bool
}, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// renewShared persists a renewal so every replica sees it.
func (s *Store) renewShared(sh Shared, id int64) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ttl, ok, err := sh.RenewLease(ctx, s.rdb, id)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, ErrLeaseNotFound
	}
	s.leases.set(id, ttl, time.Duration(ttl)*time.Second)
	// Other replicas learn the new deadline without waiting for their poll.
	if err := sh.Notify(ctx, s.rdb, s.tail.instance+notifyLease); err != nil {
		s.log.Debug("lease renewal notification failed", "err", err)
	}
	return ttl, nil
}

// Execer is a pool or a transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
