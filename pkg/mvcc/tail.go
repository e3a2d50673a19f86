package mvcc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// tailer publishes on a shared database (ADR-007): it feeds the Hub from the
// log table in revision order, whichever replica committed, and mirrors the
// database's floors and leases. mu orders what reaches the Hub and every
// change of the in-memory lease table, whether it comes from this
// replica's writer (published) or from the database (catchUp, syncLeases);
// the floors are raised without it (storeMax only moves them up).
type tailer struct {
	s        *Store
	sh       Shared
	instance string // prefixes this replica's notifications
	mu       sync.Mutex
	wake     chan struct{}
	leasesCh chan struct{}
	stop     context.CancelFunc
	done     chan struct{}
}

// Notification payloads: the sender's instance ID, then what changed.
const (
	notifyRev   = "r" // new revisions (or a new compact floor)
	notifyLease = "l" // a lease was granted, revoked or renewed
)

// tailMetaSQL reads the committed revision and Compact's floor.
const tailMetaSQL = `SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact')`

// tailStep bounds how many revisions one read of the log brings in.
const tailStep = 1000

// tailPoll is the safety net when a notification is lost; it also reads
// the floors another replica's pruning raised, which sends none.
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
		have, _, _ := t.s.hub.state()
		if have >= rev {
			break
		}
		// Every revision <= rev committed before meta said rev (the batch
		// lock orders commits), so any later read sees all of them.
		to := min(rev, have+tailStep)
		evs, err := t.s.eventsFromLog(ctx, have+1, to, all)
		if below := (*BelowFloorError)(nil); errors.As(err, &below) {
			// This replica fell behind retention (cut off from the
			// database for longer than --retain, or slower than the
			// replica that pruned): what lies below the floor is gone for
			// every reader. Move on to the floor, as after a compaction:
			// the watchers still behind it are cancelled, and clients
			// relist. Retrying would never succeed.
			t.s.log.Warn("this replica fell behind the retention floor; its watchers behind it are cancelled", "from", have+1, "floor", below.Floor)
			storeMax(&t.s.committed, below.Floor-1)
			t.s.hub.skip(below.Floor - 1)
			continue
		}
		if err != nil {
			return err
		}
		// The revision moves before the Hub does, as in localPublisher:
		// a client that saw an event of revision to and then reads must
		// read at to or later.
		storeMax(&t.s.committed, to)
		t.s.hub.publish(to, evs)
	}
	storeMax(&t.s.committed, rev)
	return nil
}

// published takes this replica's own committed batch: its events go
// straight to the Hub when nothing from other replicas is missing before
// them; otherwise the gap and the batch are read back from the log. Lease
// changes are applied under the same lock, so a concurrent lease sync
// cannot undo them.
func (t *tailer) published(c *committed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.applyLeases(t.s.leases)
	storeMax(&t.s.compact, c.compact)
	if c.rev == c.startRev {
		return
	}
	have, _, _ := t.s.hub.state()
	switch {
	case have >= c.rev:
		// The tailer already read it back.
	case have == c.startRev:
		storeMax(&t.s.committed, c.rev)
		t.s.hub.publish(c.rev, c.events)
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

// storeMax raises v to n (never lowers it).
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

// renew restarts a lease's TTL in the database, and wakes the other
// replicas so that they learn the new deadline before their next poll.
func (t *tailer) renew(ctx context.Context, id int64) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ttl, ok, err := t.sh.RenewLease(ctx, t.s.rdb, id)
	if err != nil || !ok {
		return ttl, ok, err
	}
	if err := t.sh.Notify(ctx, t.s.rdb, t.instance+notifyLease); err != nil {
		t.s.log.Debug("lease renewal notification failed", "err", err)
	}
	return ttl, true, nil
}
