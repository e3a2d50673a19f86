package mvcc

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Options tune a Store; zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// MaxBatch bounds how many requests share one commit (default 512).
	MaxBatch int
	// RingBytes bounds the in-memory event ring that serves watchers; older
	// events are read back from the log table (default 16 MiB).
	// While the ring holds more than its keep, it drops the revisions
	// every watch stream has read but the newest; below it they stay, for
	// a watch that starts a little in the past. The keep is as much as
	// the live keys' values, at least 1 MiB and at most RingKeepBytes
	// (default 2 MiB, at most RingBytes): a small store keeps no more
	// history in memory than it holds (ADR-022).
	RingBytes     int
	RingKeepBytes int
	// LogReadBytes bounds the events one read back from the log holds in
	// memory (a watcher's catch-up, a replica's tailer): the read stops
	// after the first revision that reaches it (default 16 MiB).
	LogReadBytes int
	// LeaseCheckInterval is how often lease deadlines are checked.
	LeaseCheckInterval time.Duration
	// Now is the clock (tests).
	Now func() time.Time
	// Retain keeps history for this long (0: forever); RetainPrefixes
	// override it for keys under a prefix.
	Retain         time.Duration
	RetainPrefixes []RetentionRule
	// RetainBytes bounds the default rule's history by size as well
	// (0: by time only; budget.go), and each prefix rule's that names no
	// size of its own (RetentionRule.MaxBytes).
	RetainBytes int64
	// PruneInterval is how often retention runs; PruneBatch bounds the rows
	// one pruning transaction examines.
	PruneInterval time.Duration
	PruneBatch    int
	// Hold, when set, names the lowest revision a consumer outside the
	// store still has to read from the log (0: none): every rule's floor
	// stays at or below it, whatever its time or size asks. The consumer
	// bounds how long it holds (replication: --replicate-hold).
	Hold func() int64
	// LiveIndexBytes budgets the live index, the in-memory index of the
	// live keys that serves latest-revision reads (index.go, and
	// index_replica.go on a ReplicaDialect): its rows and the values it
	// holds; past it the index is dropped. 0 takes DefaultLiveIndexBytes.
	// LiveIndexValueBytes bounds the values it holds (ADR-041): the others
	// are read from the database when asked for. 0 takes
	// DefaultLiveIndexValueBytes. DisableLiveIndex turns it off.
	LiveIndexBytes      int64
	LiveIndexValueBytes int64
	DisableLiveIndex    bool
	// QuotaBytes is the space quota (ADR-049, quota.go): past it, requests
	// that grow the store are refused (CheckQuota) and a NOSPACE alarm is
	// raised. 0: none.
	QuotaBytes int64
}

// DefaultLiveIndexBytes is the live index's default budget.
const DefaultLiveIndexBytes = 256 << 20

// DefaultLiveIndexValueBytes is the default budget of the values the live
// index holds (ADR-041).
const DefaultLiveIndexValueBytes = 6 << 20

// Store is the revision log and the etcd semantics on top of it.
type Store struct {
	d      Dialect
	opts   Options
	log    *slog.Logger
	wdb    *sql.DB // exactly one connection: the writer's
	rdb    *sql.DB
	sql    *Statements // the dialect's, fixed when the store opens
	wstmts *prepared
	rstmts *prepared
	hub    *hub
	leases *lessor
	writer *writer
	// replica is what only replicas sharing the database use (replica.go):
	// nil on SQLite, where this process is the database's one writer.
	replica *replicaState

	memberID, clusterID uint64

	// publishedRev is the newest revision published to readers, compact the
	// floor Compact set, retainFloor the highest retention floor. They only
	// rise: the publisher (publish.go, or the tailer where replicas share
	// the database) raises the first two after each commit, retention the
	// third.
	publishedRev atomic.Int64
	compact      atomic.Int64
	retainFloor  atomic.Int64
	logStartMs   atomic.Int64 // the first commit's time, once known (history.go)
	rules        []*retentionRule
	pruneMu      sync.Mutex
	// budgeted: a rule has a byte budget; accounted is the revision its
	// accounting has read to (budget.go). Both under pruneMu.
	budgeted  bool
	accounted int64
	// index, when set, answers latest-revision reads (index.go).
	index atomic.Pointer[liveIndex]
	// releasing is set while freed memory goes back to the operating
	// system (publish.go) through freeOSMemory (tests count the calls);
	// releaseLater is the second release, after the last big drop.
	releasing    atomic.Bool
	freeOSMemory func()
	releaseMu    sync.Mutex
	releaseLater *time.Timer
	// background runs the work a batch leaves behind on the readers' pool
	// (batch_sqlite.go's checkpoint): Close cancels bgCtx and waits for it
	// before it closes that pool.
	background sync.WaitGroup
	bgCtx      context.Context
	bgCancel   context.CancelFunc

	reqs      chan *writeReq
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool

	quota quotaState // quota.go
}

// Open connects, migrates the schema and starts the writer.
func Open(ctx context.Context, d Dialect, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = 16 << 20
	}
	if opts.RingKeepBytes <= 0 {
		opts.RingKeepBytes = 2 << 20
	}
	if opts.LogReadBytes <= 0 {
		opts.LogReadBytes = 16 << 20
	}
	if opts.LeaseCheckInterval <= 0 {
		opts.LeaseCheckInterval = 250 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PruneInterval <= 0 {
		opts.PruneInterval = 30 * time.Second
	}
	if opts.PruneBatch <= 0 {
		opts.PruneBatch = 200
	}
	if opts.LiveIndexBytes <= 0 {
		opts.LiveIndexBytes = DefaultLiveIndexBytes
	}
	if opts.LiveIndexValueBytes <= 0 {
		opts.LiveIndexValueBytes = DefaultLiveIndexValueBytes
	}
	sh, _ := d.(ReplicaDialect)
	stmts := d.Statements()
	if err := stmts.check(sh != nil); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name(), err)
	}
	wdb, rdb, err := d.Open(ctx)
	if err != nil {
		return nil, err
	}
	s := &Store{
		d: d, opts: opts, log: opts.Logger, wdb: wdb, rdb: rdb,
		sql:    stmts,
		wstmts: newPrepared(wdb),
		rstmts: newPrepared(rdb),
		reqs:   make(chan *writeReq, 4096),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		leases: newLessor(opts.Now),
		// A full collection, then every free page returned.
		freeOSMemory: debug.FreeOSMemory,
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	if err := s.migrate(ctx, sh); err != nil {
		return nil, s.abandon(err)
	}
	if err := s.prepareStatements(ctx, sh == nil); err != nil {
		return nil, s.abandon(fmt.Errorf("prepare the statements: %w", err))
	}
	st, err := s.loadState(ctx)
	if err != nil {
		return nil, s.abandon(err)
	}
	if err := s.initRules(ctx); err != nil {
		return nil, s.abandon(err)
	}
	if err := s.loadAlarms(ctx); err != nil {
		return nil, s.abandon(err)
	}
	if opts.QuotaBytes > 0 {
		if _, err := s.measure(ctx); err != nil {
			return nil, s.abandon(fmt.Errorf("measuring the database for the quota: %w", err))
		}
	}
	s.publishedRev.Store(st.rev)
	s.compact.Store(st.compact)
	s.memberID, s.clusterID = uint64(st.member), uint64(st.cluster)
	s.hub = newHub(st.rev, opts.RingBytes, opts.RingKeepBytes, opts.Now)
	s.hub.onExpire = s.droppedFromHub
	s.hub.keepFor = s.ringKeep

	// Who writes besides us decides how batches are written and published
	// (the batcher and publisher here); reads, leases and the live index
	// test s.replica where replicas differ.
	w := &writer{s: s, born: time.Now()}
	s.writer = w
	if sh != nil {
		err = s.openReplica(ctx, sh, w)
	} else {
		err = s.openSQLite(ctx, st, w)
	}
	if err != nil {
		return nil, s.abandon(err)
	}
	go w.run()
	go s.expireLeases()
	go s.pruneLoop()
	go s.quotaLoop()
	return s, nil
}

// openSQLite readies a store whose database this process alone writes:
// leases and revisions come from memory, and batches from sqliteBatcher.
func (s *Store) openSQLite(ctx context.Context, st persisted, w *writer) error {
	for id, ttl := range st.leases {
		// etcd gives every lease its full TTL again after a leader
		// change; a restart is the same event here.
		s.leases.add(id, ttl)
	}
	if !s.opts.DisableLiveIndex {
		// Before the writer starts, so nothing changes while it loads.
		if err := s.openIndex(ctx, st.rev); err != nil {
			return err
		}
	}
	start := BatchStart{Rev: st.rev, Compact: st.compact, LastUnixMs: st.lastUnixMs}
	w.b, w.pub = newSQLiteBatcher(s, start), localPublisher{s: s}
	return nil
}

// openIndex loads the live index, unless the live keys exceed its budget.
func (s *Store) openIndex(ctx context.Context, rev int64) error {
	c, err := loadIndex(ctx, s.wdb, s.sql.Current.All, rev, s.indexBudget())
	if err != nil {
		return fmt.Errorf("load the live index: %w", err)
	}
	if c == nil {
		s.log.Warn("the live keys exceed the live index budget: reads go to the database", "live_index_bytes", s.opts.LiveIndexBytes)
		return nil
	}
	s.index.Store(c)
	c.logLoaded(s.log, s.opts.LiveIndexBytes)
	s.warnBudget(c.bytes())
	return nil
}

// Close finishes the requests already queued, then closes the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
		// The writer has stopped, so it starts no more background work.
		s.bgCancel()
		s.background.Wait()
		// The tailer first: where replicas share the database it is what
		// changes the index.
		if s.replica != nil {
			s.replica.tail.close()
		}
		// A closed store answers nothing, not even from memory.
		s.index.Store(nil)
		s.indexChanged()
		s.hub.close()
		s.releaseMu.Lock()
		if s.releaseLater != nil {
			s.releaseLater.Stop()
		}
		s.releaseMu.Unlock()
		s.wstmts.close()
		s.rstmts.close()
		s.closeErr = s.wdb.Close()
		if e := s.rdb.Close(); s.closeErr == nil {
			s.closeErr = e
		}
		// The dialect last: SQLite's lock outlives every connection.
		if c, ok := s.d.(io.Closer); ok {
			if e := c.Close(); s.closeErr == nil {
				s.closeErr = e
			}
		}
	})
	return s.closeErr
}

// abandon closes what a failed Open had opened and returns err.
func (s *Store) abandon(err error) error {
	s.bgCancel()
	if s.replica != nil && s.replica.tail.stop != nil {
		s.replica.tail.close()
	}
	s.wstmts.close()
	s.rstmts.close()
	s.wdb.Close()
	s.rdb.Close()
	if c, ok := s.d.(io.Closer); ok {
		c.Close()
	}
	return err
}

// MemberID and ClusterID are random, fixed when the database was created
// (Maintenance).
func (s *Store) MemberID() uint64  { return s.memberID }
func (s *Store) ClusterID() uint64 { return s.clusterID }

// Rev is the newest committed revision (ReadView).
func (s *Store) Rev() int64 { return s.publishedRev.Load() }

// Replicated reports whether replicas share the database (a ReplicaDialect
// dialect: PostgreSQL or MySQL), so that other processes may write it too.
func (s *Store) Replicated() bool { return s.replica != nil }

// DBSize reports the database size and the part of it in use (Maintenance).
func (s *Store) DBSize(ctx context.Context) (total, inUse int64, err error) {
	return s.d.Size(ctx, s.rdb)
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
