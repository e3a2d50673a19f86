package mvcc

import (
	"context"
	"fmt"
	"sync"
	"time"
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
// changes up to it; one below have missed some and is reloaded.
func (s *Store) followIndex(have, to int64, evs []*Event) {
	c := s.index.Load()
	if c == nil || c.stale {
		return
	}
	at := c.pub.Load().rev
	switch {
	case at >= to:
		return
	case at < have:
		s.log.Warn("the live index missed revisions; reloading it", "index", at, "from", have+1)
		s.staleIndex()
		s.indexMoved.notify()
		return
	case at > have:
		var newer []*Event
		for _, e := range evs {
			if e.Rev() > at {
				newer = append(newer, e)
			}
		}
		evs = newer
	}
	if !c.apply(to, evs) {
		s.dropIndex(fmt.Sprintf("the live keys (%d bytes) outgrew the live index budget (%d bytes)", c.bytes, c.limit))
	}
	s.indexMoved.notify()
}

// loadSharedIndex reads the live index from one snapshot of the database,
// at the revision meta has in it. The tailer then skips what it holds.
func (s *Store) loadSharedIndex(ctx context.Context, limit int64) (*liveIndex, error) {
	tx, done, err := s.readTx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	var rev int64
	if err := tx.QueryRowContext(ctx, tailMetaSQL).Scan(&rev, new(int64)); err != nil {
		return nil, err
	}
	return loadIndex(ctx, tx, rev, limit)
}

// reloadSharedIndex replaces a stale index (the tailer, under its lock).
func (s *Store) reloadSharedIndex(ctx context.Context) error {
	c := s.index.Load()
	if c == nil || !c.stale {
		return nil
	}
	fresh, err := s.loadSharedIndex(ctx, c.limit)
	if err != nil {
		return fmt.Errorf("reload the live index: %w", err)
	}
	if fresh == nil {
		s.dropIndex(fmt.Sprintf("the live keys outgrew the live index budget (%d bytes)", c.limit))
	} else {
		s.index.Store(fresh)
	}
	s.indexMoved.notify()
	return nil
}

// sharedSnapshot is the index's snapshot for a Range at the latest revision
// on a shared database: one at or after the revision the database had when
// the read began, unless serializable. Nil (and no error) means the index
// stopped serving: read SQL.
func (s *Store) sharedSnapshot(ctx context.Context, serializable bool) (*snapshot, error) {
	if serializable {
		if c := s.index.Load(); c != nil {
			return c.pub.Load(), nil
		}
		return nil, nil
	}
	rev, err := s.fence.wait(ctx)
	if err != nil {
		return nil, err
	}
	for {
		moved := s.indexMoved.wait()
		c := s.index.Load()
		if c == nil {
			return nil, nil
		}
		snap := c.pub.Load()
		if snap != nil && snap.rev >= rev {
			return snap, nil
		}
		// What this replica's writer committed it publishes itself, in
		// microseconds: waking the tailer for it would cost the database a
		// query per read under mixed load. Anything else (another
		// replica's batch, a stale index to load again) is the tailer's.
		nudge := fenceNudge
		if snap == nil || rev > s.ownCommitted.Load() {
			s.tail.need(readLog)
			nudge = 0
		}
		switch waitMoved(ctx, moved, nudge) {
		case waitEnded:
			return nil, ctx.Err()
		case waitTimedOut:
			s.tail.need(readLog) // a safety net: the publish did not come
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
