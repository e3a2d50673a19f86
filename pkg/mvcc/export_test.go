package mvcc

import (
	"context"
	"sync"
	"time"
)

// Test hooks: the live index's state, and the one failure tests cannot
// cause (a commit whose outcome is unknown). Call them between writes: the
// writer's answers order them with its own use of the index.

func (s *Store) IndexEnabled() bool { return s.index.Load() != nil }

// IndexRev is the revision of the live index's published snapshot, 0 when
// none serves.
func (s *Store) IndexRev() int64 {
	if c := s.index.Load(); c != nil {
		if snap := c.pub.Load(); snap != nil {
			return snap.rev
		}
	}
	return 0
}

// IndexCold reports whether the live index holds key without its value
// (false also when it does not hold key, or no index serves).
func (s *Store) IndexCold(key string) bool {
	if c := s.index.Load(); c != nil {
		if snap := c.pub.Load(); snap != nil {
			e, ok := snap.tree.Get(probe([]byte(key)))
			return ok && e.cold
		}
	}
	return false
}

// IndexValueBytes is the bytes of values the live index holds.
func (s *Store) IndexValueBytes() int64 {
	var n int64
	if c := s.index.Load(); c != nil {
		if snap := c.pub.Load(); snap != nil {
			snap.tree.Ascend(func(e *entry) bool { n += e.valueCost(); return true })
		}
	}
	return n
}

func (s *Store) IndexServing() bool {
	c := s.index.Load()
	return c != nil && c.pub.Load() != nil
}

// FailCommitOutcome does to the store what a commit that failed in an
// unknown state does: the index stops serving and the next batch starts
// from the database.
func (s *Store) FailCommitOutcome() {
	s.staleIndex()
	if b, ok := s.writer.b.(*sqliteBatcher); ok {
		b.uncertain = true
	}
}

// EtcdContains is etcd's rule for a key in [key, range_end), stated
// directly (keyrange_fuzz_test.go), for the fuzz targets outside the
// package.
var EtcdContains = etcdContains

// GoneMin is the fewest keys a batch's range delete records as a range.
const GoneMin = goneMin

// HoldWriter takes the writer's one database connection, so that the
// writer waits at its next batch's start while requests queue behind it;
// release gives the connection back.
func (s *Store) HoldWriter() (release func(), err error) {
	conn, err := s.wdb.Conn(context.Background())
	if err != nil {
		return nil, err
	}
	return func() { conn.Close() }, nil
}

// WriterInDB is whether the writer is running a batch's transaction or
// otherwise waiting on the database.
func (s *Store) WriterInDB() bool { return s.writer.inDB.Load() }

// QueuedWrites is how many requests wait for the writer.
func (s *Store) QueuedWrites() int { return len(s.reqs) }

// OnReleaseMemory replaces what the store calls to hand the memory a big
// revision leaves behind back to the operating system. Call it before the
// writes.
func (s *Store) OnReleaseMemory(f func()) { s.freeOSMemory = f }

// WriterRowReads is how many current rows the SQLite writer has read one
// at a time, outside a batch's first read of the rows it names.
func (s *Store) WriterRowReads() int64 { return s.writer.b.(*sqliteBatcher).rowReads.Load() }

// HoldTailer keeps a replica's tailer from following the database until
// release is called: a replica falling behind.
func (s *Store) HoldTailer() (release func()) {
	s.replica.tail.mu.Lock()
	return s.replica.tail.mu.Unlock
}

// SetTailPoll sets how often the tailers of the stores opened from now on
// poll while their LISTEN connection is down (and wait to retry a failed
// read). Call restore once those stores are closed (register it with
// t.Cleanup before opening them).
func SetTailPoll(d time.Duration) (restore func()) {
	old := tailPoll
	tailPoll = d
	return func() { tailPoll = old }
}

// TailListening is whether a replica's tailer knows its LISTEN connection
// to be up.
func (s *Store) TailListening() bool { return s.replica.tail.listening.Load() }

// SetNarrowRange sets how many changes a range may hold to be read through
// its keys (logpage.go) until the returned func puts it back: 0 reads
// every range through the log from the cursor.
func SetNarrowRange(n int) (restore func()) {
	old := narrowRange
	narrowRange = n
	return func() { narrowRange = old }
}

// LogBytes is what the log holds, keys and values; live is the part of it
// the live state's rows hold.
func (s *Store) LogBytes(ctx context.Context) (all, live int64, err error) {
	err = s.rdb.QueryRowContext(ctx, `SELECT COALESCE(SUM(octet_length(key) + COALESCE(octet_length(value), 0)), 0),
		COALESCE(SUM(CASE WHEN id IN (SELECT MAX(id) FROM log GROUP BY key) AND deleted = 0 THEN octet_length(key) + COALESCE(octet_length(value), 0) ELSE 0 END), 0) FROM log`).Scan(&all, &live)
	return all, live, err
}

// RuleFloor is the retention floor of the rule that governs key.
func (s *Store) RuleFloor(key string) Floor { return s.ruleFor([]byte(key)).floor() }

// SetScanBounds sets how many log rows a filtered Log page reads
// (logscan.go) and how many keys a RangeAt page looks at (rangeat.go),
// until the returned func puts them back.
func SetScanBounds(rows, keys int) (restore func()) {
	oldRows, oldKeys := logScanRows, rangeAtScanKeys
	logScanRows, rangeAtScanKeys = rows, keys
	return func() { logScanRows, rangeAtScanKeys = oldRows, oldKeys }
}

// HoldPublish makes the writer's next publish (publish.go) wait, as when
// readers run between a batch's commit and its publish: committed is
// closed once the batch has committed and its publish waits, release lets
// it go on. Call it between writes, as FailCommitOutcome.
func (s *Store) HoldPublish() (committed <-chan struct{}, release func()) {
	h := &heldPublisher{next: s.writer.pub, committed: make(chan struct{}), release: make(chan struct{})}
	s.writer.pub = h
	var once sync.Once
	return h.committed, func() { once.Do(func() { close(h.release) }) }
}

type heldPublisher struct {
	next               publisher
	committed, release chan struct{}
	held               bool // the writer's alone
}

func (h *heldPublisher) published(c *batchCommit) {
	if !h.held {
		h.held = true
		close(h.committed)
		<-h.release
	}
	h.next.published(c)
}

// RingBytes is the bytes of events the Hub's ring holds.
func (s *Store) RingBytes() int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.bytes
}

// SetHashPage sets the most live keys a page of the state hash reads.
func SetHashPage(rows int) (restore func()) {
	old := hashPageRows
	hashPageRows = rows
	return func() { hashPageRows = old }
}

// SetLivePage sets the most live keys a page of ReadLive reads.
func SetLivePage(rows int) (restore func()) {
	old := livePageRows
	livePageRows = rows
	return func() { livePageRows = old }
}
