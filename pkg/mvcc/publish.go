package mvcc

import "time"

// publisher makes a committed batch visible to reads, watchers and the
// lease table. The writer calls it after every commit and before any
// request of the batch is answered, so that a read or watch that starts
// after an answer sees the batch. In a single process (localPublisher)
// that is the live index, the revision and floor, the leases and the Hub;
// on a shared database the tailer does it (tail.go), because other
// replicas' batches arrive there too.
type publisher interface {
	published(c *batchCommit)
}

// batchCommit is what a batch changed; startRev == rev when it took no
// revision (a failed compare, a Compact, a lease grant).
type batchCommit struct {
	startRev, rev, compact int64
	events                 []*Event
	granted                map[int64]int64 // lease id -> ttl
	revoked                map[int64]bool
}

// applyLeases folds the batch's grants and revocations into the lease table.
func (c *batchCommit) applyLeases(l *lessor) {
	for id, ttl := range c.granted {
		l.add(id, ttl)
	}
	for id := range c.revoked {
		l.remove(id)
	}
}

type localPublisher struct{ s *Store }

func (p localPublisher) published(c *batchCommit) {
	s := p.s
	if c.rev != c.startRev {
		// Before the revision moves: a read at the new revision finds it.
		s.indexBatch(c.rev, c.events)
	}
	s.compact.Store(c.compact)
	s.publishedRev.Store(c.rev)
	c.applyLeases(s.leases)
	if c.rev != c.startRev {
		// The events are the batch's own: the Hub keeps them.
		s.droppedFromHub(s.hub.publish(c.rev, c.events))
	}
}

// releaseBytes is how many bytes of events leaving the Hub at once (a big
// DeleteRange's, whose rows the live index no longer holds either) make the
// store hand the memory back to the operating system.
const releaseBytes = 64 << 20

// droppedFromHub is told how many bytes of events the Hub dropped at once,
// at a publish or when a hold ended (hub.expire).
func (s *Store) droppedFromHub(bytes int) {
	if bytes >= releaseBytes {
		s.releaseMemory()
	}
}

// ringKeepFloor is the least the ring keeps of events every watch stream
// has read, however small the store: a relist's watch from its list's
// revision, while a few writes run, still starts from memory.
const ringKeepFloor = 1 << 20

// ringKeep is what the ring keeps of events every watch stream has read
// (hub.trim): as much as the live keys' values, at least ringKeepFloor.
// A small store's watchers would otherwise hold up to four times its
// data in events nobody needs; a large one's keep is RingKeepBytes, as
// before (ADR-022). Without a live index it is RingKeepBytes.
func (s *Store) ringKeep() int {
	if c := s.index.Load(); c != nil {
		if p := c.pub.Load(); p != nil {
			return int(max(p.live, ringKeepFloor))
		}
	}
	return s.opts.RingKeepBytes
}

// releaseAgain is how long after the first the second release comes.
// Watchers still sending a big revision's events when the Hub drops them
// (a slow client's, or many watchers'; one watcher of 200,000 events of 1
// KiB is done in under 100 ms here) keep them alive through the first; on
// a store that then goes quiet nothing would collect them again for
// minutes.
const releaseAgain = 5 * time.Second

// releaseMemory returns the freed heap to the operating system now in the
// background, and again releaseAgain after the last drop: the Go runtime
// would otherwise keep it until a later collection, long after the
// delete, and the process would stay at its peak.
func (s *Store) releaseMemory() {
	go s.freeMemory()
	s.releaseMu.Lock()
	defer s.releaseMu.Unlock()
	if s.releaseLater == nil {
		s.releaseLater = time.AfterFunc(releaseAgain, s.freeMemory)
	} else {
		s.releaseLater.Reset(releaseAgain)
	}
}

// freeMemory is one release; at most one runs at a time, and none once
// the store is closed.
func (s *Store) freeMemory() {
	if s.closed.Load() || !s.releasing.CompareAndSwap(false, true) {
		return
	}
	defer s.releasing.Store(false)
	s.freeOSMemory()
}
