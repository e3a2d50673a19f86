package mvcc

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The live index on a shared database (PostgreSQL, ADR-016). Several
// replicas write there, so no writer owns the index; the tailer does. It
// applies every batch, this replica's and the others', in revision order
// under its lock, from the same events it gives the Hub, so the index is
// always exactly the database at its revision.
//
// It may lag: another replica's acknowledged write reaches this one only
// when the tailer reads it. A read at the latest revision therefore first
// asks the database for its revision (readFence) and waits for the index to
// reach it. That is etcd's ReadIndex: one short query, shared by every read
// that arrives while the previous one runs, instead of the read itself in
// SQL. Serializable reads skip it, as they skip etcd's.

// followIndex folds the revisions (have, to] into the live index; evs are
// every change in them. The tailer calls it, under its lock, before the Hub
// gets them. An index loaded at a revision above have already holds the
// changes up to it; one below have missed some: it stops serving, and the
// tailer's next catch-up reads it again. fromLog says the events were read
// from the log: their bytes share the reader's chunks with other events,
// which the index must not keep alive, so it keeps copies.
func (s *Store) followIndex(have, to int64, evs []*Event, fromLog bool) {
	c := s.index.Load()
	if c == nil || c.stale {
		return
	}
	at := c.pub.Load().rev
	switch {
	case at >= to:
		return
	case at < have:
		s.log.Warn("the live index missed revisions; reading it again", "index", at, "from", have+1)
		s.staleIndex()
		s.replica.indexMoved.notify()
		s.replica.tail.need(readLog)
		return
	}
	if at > have || fromLog {
		kept := make([]*Event, 0, len(evs))
		for _, e := range evs {
			if e.Rev() <= at {
				continue
			}
			if fromLog {
				kv := e.Kv
				e = &Event{Type: e.Type, Kv: &mvccpb.KeyValue{
					Key: bytes.Clone(kv.Key), Value: bytes.Clone(kv.Value),
					CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
					Version: kv.Version, Lease: kv.Lease,
				}}
			}
			kept = append(kept, e)
		}
		evs = kept
	}
	if !c.apply(to, evs) {
		s.dropIndex(fmt.Sprintf("the live keys (%d bytes) outgrew the live index budget (%d bytes)", c.rowBytes, c.limit))
	}
	s.replica.indexMoved.notify()
}

// loadReplicaIndex reads the live index from one snapshot of the database,
// at the revision meta has in it. The tailer then skips what it holds.
func (s *Store) loadReplicaIndex(ctx context.Context, b indexBudget) (*liveIndex, error) {
	tx, done, err := s.readTx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var rev int64
	if err := tx.QueryRowContext(ctx, s.sql.Meta.RevCompact).Scan(&rev, new(int64)); err != nil {
		return nil, err
	}
	return loadIndex(ctx, tx, s.sql.Current.All, rev, b)
}

// indexBehind reports whether a serving live index is at a revision below
// rev.
func (s *Store) indexBehind(rev int64) bool {
	c := s.index.Load()
	if c == nil || c.stale {
		return false
	}
	return c.pub.Load().rev < rev
}

// reloadTimeout bounds reading the live index again, as long as Open's
// first read of it may take on a large store.
const reloadTimeout = 5 * time.Minute

// reloadReplicaIndex replaces a stale index (the tailer, under its lock,
// before it reads the log). Reads go to SQL while it is stale. If reading
// it fails, the index is dropped, as when it outgrows its budget: the Hub
// must not wait on it, and a load that failed once would cost the database
// a full read at every catch-up.
func (s *Store) reloadReplicaIndex(ctx context.Context) {
	c := s.index.Load()
	if c == nil || !c.stale {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	fresh, err := s.loadReplicaIndex(ctx, indexBudget{limit: c.limit, values: c.valueLimit})
	switch {
	case err != nil:
		s.dropIndex(fmt.Sprintf("reading it again failed: %v", err))
	case fresh == nil:
		s.dropIndex(fmt.Sprintf("the live keys outgrew the live index budget (%d bytes)", c.limit))
	default:
		s.index.Store(fresh)
		s.replica.indexMoved.notify()
	}
}

// replicaSnapshot is the index's snapshot for a Range at the latest revision
// on a shared database: one at or after the revision the database had when
// the read began, unless serializable. Nil (and no error) means the index
// does not serve (dropped, or stale until the tailer reads it again): read
// SQL.
func (s *Store) replicaSnapshot(ctx context.Context, serializable bool) (*snapshot, error) {
	if serializable {
		if c := s.index.Load(); c != nil {
			return c.pub.Load(), nil
		}
		return nil, nil
	}
	seen := s.seenRev() // before the fence's query, which covers it
	rev, err := s.replica.fence.wait(ctx)
	if err != nil {
		return nil, err
	}
	if rev < seen {
		// The database lost revisions the index holds (regress.go): it
		// moves past them and the index is read again first.
		if err := s.followLoss(); err != nil {
			return nil, err
		}
		if rev, err = s.replica.fence.wait(ctx); err != nil {
			return nil, err
		}
	}
	for {
		moved := s.replica.indexMoved.wait()
		c := s.index.Load()
		if c == nil {
			return nil, nil
		}
		snap := c.pub.Load()
		if snap == nil {
			return nil, nil
		}
		if snap.rev >= rev {
			return snap, nil
		}
		// What this replica's writer committed it publishes itself, in
		// microseconds: waking the tailer for it would cost the database a
		// query per read under mixed load. Another replica's batch is the
		// tailer's.
		nudge := fenceNudge
		if rev > s.replica.ownRev.Load() {
			s.replica.tail.need(readLog)
			nudge = 0
		}
		switch waitMoved(ctx, moved, nudge) {
		case waitEnded:
			return nil, ctx.Err()
		case waitTimedOut:
			s.replica.tail.need(readLog) // a safety net: the publish did not come
		}
	}
}

// fenceNudge is how long a read waits for its own replica's publish before
// it asks the tailer as well.
const fenceNudge = 50 * time.Millisecond

const (
	waitMovedOn = iota
	waitTimedOut
	waitEnded // ctx ended
)

// waitMoved waits for moved, for at most d if d > 0.
func waitMoved(ctx context.Context, moved <-chan struct{}, d time.Duration) int {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-moved:
		return waitMovedOn
	case <-timeout:
		return waitTimedOut
	case <-ctx.Done():
		return waitEnded
	}
}

// readFence reads the database's revision for linearizable reads. A read
// waits for a query that started after it arrived, so the revision covers
// every write acknowledged before the read began, on any replica; the reads
// that arrive while one query runs share the next.
type readFence struct {
	base  context.Context // the store's: its end stops the queries
	query func(ctx context.Context) (int64, error)

	mu      sync.Mutex
	running bool
	next    *fenceRound // not started yet: a read that arrives joins it
}

type fenceRound struct {
	done chan struct{}
	rev  int64
	err  error
}

// fenceTimeout bounds one query of the revision; the reads waiting on it
// get its error.
const fenceTimeout = 10 * time.Second

func (f *readFence) wait(ctx context.Context) (int64, error) {
	f.mu.Lock()
	r := f.next
	if r == nil {
		r = &fenceRound{done: make(chan struct{})}
		f.next = r
	}
	if !f.running {
		f.running = true
		f.next = nil
		go f.run(r)
	}
	f.mu.Unlock()
	select {
	case <-r.done:
		return r.rev, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run answers r, then each round that reads joined meanwhile, one at a
// time.
func (f *readFence) run(r *fenceRound) {
	for r != nil {
		ctx, cancel := context.WithTimeout(f.base, fenceTimeout)
		r.rev, r.err = f.query(ctx)
		cancel()
		close(r.done)
		f.mu.Lock()
		r, f.next = f.next, nil
		if r == nil {
			f.running = false
		}
		f.mu.Unlock()
	}
}

// notifier lets goroutines wait for the next change of something.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next notify. Take it before
// checking the state it guards, so that no change is missed between.
func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
