package mvcc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// tailer publishes on a shared database (ADR-007): it feeds the Hub from the
// log table in revision order, whichever replica committed, and mirrors the
// database's floors and leases. mu orders what reaches the Hub and the live
// index (index_replica.go) and every change of the in-memory lease table,
// whether it comes from this replica's writer (published) or from the
// database (catchUp, syncLeases); the floors are raised without it
// (storeMax only moves them up).
//
// Every change another replica makes to what the tailer follows sends a
// notification in its transaction (a batch's revisions, Compact's floor,
// lease grants, revocations, expiries and renewals, retention floors), and
// PostgreSQL delivers each committed notification to every session
// listening when it commits. So while the LISTEN connection is up the
// tailer reads the database only when told to, and sends no query while
// the replicas rest; while it is down the tailer polls, and when it is
// back reads everything once (what committed while nobody listened).
type tailer struct {
	s         *Store
	sh        ReplicaDialect
	instance  string // prefixes this replica's notifications
	mu        sync.Mutex
	pending   atomic.Uint32 // what to read from the database next (read*)
	listening atomic.Bool
	wake      chan struct{}
	stop      context.CancelFunc
	done      chan struct{}
}

// Notification payloads: the sender's instance ID, then what changed.
const (
	notifyRev   = "r" // new revisions (or a new compact floor)
	notifyLease = "l" // a lease was granted, revoked, expired or renewed
	notifyFloor = "f" // retention raised a floor (retention.go)
)

// What the tailer reads from the database.
const (
	readLog    uint32 = 1 << iota // the revision, Compact's floor, the log up to them
	readLeases                    // the lease table
	readFloors                    // the retention floors
	readAll    = readLog | readLeases | readFloors
)

// tailStep bounds how many revisions one read of the log brings in.
const tailStep = 1000

// tailPoll is how often the tailer reads everything while its LISTEN
// connection is down, and how long it waits to retry a failed read. A
// variable only for the tests, which make it long to show that what they
// check arrives by notification.
var tailPoll = time.Second

func newTailer(s *Store, sh ReplicaDialect) *tailer {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &tailer{s: s, sh: sh, instance: hex.EncodeToString(b[:]),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// need asks the tailer to read what from the database.
func (t *tailer) need(what uint32) {
	t.pending.Or(what)
	poke(t.wake)
}

func (t *tailer) start() {
	ctx, cancel := context.WithCancel(context.Background())
	t.stop = cancel
	listenDone, announced := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(announced)
		t.sh.Announce(ctx, t.s.Rev)
	}()
	go func() {
		defer close(listenDone)
		if err := t.sh.Listen(ctx, t.connected, t.notified); err != nil {
			// The tailer polls while nothing listens: now for good.
			t.s.log.Warn("following the other replicas by reading the database every "+tailPoll.String()+" instead of by notification", "why", err)
		}
	}()
	go func() {
		defer close(t.done)
		defer func() { <-listenDone; <-announced }()
		t.run(ctx)
	}()
}

// connected follows the LISTEN connection. Either way everything is read
// once: on the way up what committed while nobody listened, on the way
// down what the lost connection had not delivered yet.
func (t *tailer) connected(up bool) {
	t.listening.Store(up)
	t.need(readAll)
}

func (t *tailer) notified(payload string) {
	if len(payload) > len(t.instance) && payload[:len(t.instance)] == t.instance {
		return // our own commit: already published by the writer
	}
	what := readAll
	if len(payload) > 0 {
		switch payload[len(payload)-1:] {
		case notifyRev:
			what = readLog
		case notifyLease:
			// An expiry or revocation takes a revision too.
			what = readLog | readLeases
		case notifyFloor:
			what = readFloors
		}
	}
	t.need(what)
}

func (t *tailer) close() {
	t.stop()
	<-t.done
}

func (t *tailer) run(ctx context.Context) {
	// Until the LISTEN connection is up, the tailer polls.
	poll := time.NewTicker(tailPoll)
	defer poll.Stop()
	polling := true
	retry := time.NewTimer(tailPoll)
	retry.Stop()
	defer retry.Stop()
	var lastErr time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-poll.C:
			t.pending.Or(readAll)
		case <-retry.C:
		}
		if up := t.listening.Load(); up == polling {
			polling = !up
			if up {
				poll.Stop()
			} else {
				poll.Reset(tailPoll)
			}
		}
		what := t.pending.Swap(0)
		if what == 0 {
			continue
		}
		err := t.read(ctx, what)
		if err == nil || ctx.Err() != nil {
			continue
		}
		// No notification may come to retry it: try again after a while.
		t.pending.Or(what)
		retry.Reset(tailPoll)
		if time.Since(lastErr) > 5*time.Second {
			lastErr = time.Now()
			t.s.log.Warn("following the database failed; retrying", "err", err)
		}
	}
}

// read brings in from the database what the read* bits of what name.
func (t *tailer) read(ctx context.Context, what uint32) error {
	if what&readLog != 0 {
		if err := t.catchUp(ctx); err != nil {
			return err
		}
	}
	if what&readLeases != 0 {
		if err := t.syncLeases(ctx); err != nil {
			return err
		}
	}
	if what&readFloors != 0 {
		return t.s.syncFloors(ctx)
	}
	return nil
}

// catchUp publishes every committed revision the Hub lacks, in order.
func (t *tailer) catchUp(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.catchUpLocked(ctx)
}

func (t *tailer) catchUpLocked(ctx context.Context) error {
	t.s.reloadReplicaIndex(ctx)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Taken before the read: a revision committed after it began (the
	// writer's next batch) is not a loss.
	seen := t.s.seenRev()
	var rev, compact int64
	if err := t.s.readRow(ctx, t.s.sql.Meta.RevCompact).Scan(&rev, &compact); err != nil {
		return err
	}
	if rev < seen {
		// Committed revisions were lost (regress.go): the database moves
		// past them before anything here follows it again.
		if err := t.recoverLocked(rev, seen); err != nil {
			return err
		}
		if err := t.s.readRow(ctx, t.s.sql.Meta.RevCompact).Scan(&rev, &compact); err != nil {
			return err
		}
	}
	storeMax(&t.s.compact, compact)
	all := KeyRange{Key: []byte{}, Unbounded: true}
	step := int64(tailStep)
	for {
		have, _, _ := t.s.hub.state()
		if have >= rev {
			break
		}
		// Every revision <= rev committed before meta said rev (the batch
		// lock orders commits), so any later read sees all of them.
		to := min(rev, have+step)
		evs, through, err := t.s.eventsFromLog(ctx, have+1, to, all)
		if below := (*BelowFloorError)(nil); errors.As(err, &below) {
			// This replica fell behind retention (cut off from the
			// database for longer than --retain, or slower than the
			// replica that pruned): what lies below the floor is gone for
			// every reader. Move on to the floor, as after a compaction:
			// the watchers still behind it are cancelled, and clients
			// relist. Retrying would never succeed.
			t.s.log.Warn("this replica fell behind the retention floor (or a revision bump after lost revisions); its watchers behind it are cancelled", "from", have+1, "floor", below.Floor)
			storeMax(&t.s.publishedRev, below.Floor-1)
			t.s.hub.skip(below.Floor - 1)
			// A live index behind the floor lacks the skipped changes.
			if t.s.indexBehind(below.Floor - 1) {
				t.s.staleIndex()
				t.s.reloadReplicaIndex(ctx)
			}
			continue
		}
		if err != nil {
			return err
		}
		// A read of large values stops short: the loop goes on from there.
		step = NextReadStep(step, have+1, to, through, tailStep)
		to = through
		// The revision moves before the Hub does, as in localPublisher:
		// a client that saw an event of revision to and then reads must
		// read at to or later.
		t.s.followIndex(have, to, evs, true)
		storeMax(&t.s.publishedRev, to)
		t.s.droppedFromHub(t.s.hub.publish(to, evs))
	}
	storeMax(&t.s.publishedRev, rev)
	return nil
}

// published takes this replica's own committed batch: its events go
// straight to the Hub when nothing from other replicas is missing before
// them; otherwise the gap and the batch are read back from the log. Lease
// changes are applied under the same lock, so a concurrent lease sync
// cannot undo them.
func (t *tailer) published(c *batchCommit) {
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
		t.s.followIndex(have, c.rev, c.events, false)
		storeMax(&t.s.publishedRev, c.rev)
		t.s.droppedFromHub(t.s.hub.publish(c.rev, c.events))
	default:
		if err := t.catchUpLocked(context.Background()); err != nil {
			// The tailer will publish it once the database answers.
			t.s.log.Warn("reading back a committed batch failed; the tailer will retry", "err", err)
			t.need(readLog)
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

// renew restarts a lease's TTL in the database, and tells the other
// replicas the new deadline in the same transaction.
func (t *tailer) renew(ctx context.Context, id int64) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return t.sh.RenewLease(ctx, t.s.rdb, id, t.instance+notifyLease)
}
