package mvcc

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Options tune a Store; zero values take the defaults.
type Options struct {
	Logger *slog.Logger
	// MaxBatch bounds how many requests share one commit.
	MaxBatch int
	// RingBytes bounds the in-memory event ring that serves watchers; older
	// events are read back from the log table.
	RingBytes int
	// LeaseCheckInterval is how often lease deadlines are checked.
	LeaseCheckInterval time.Duration
	// Now is the clock (tests).
	Now func() time.Time
	// Retain keeps history for this long (0: forever); RetainPrefixes
	// override it for keys under a prefix.
	Retain         time.Duration
	RetainPrefixes []RetentionRule
	// PruneInterval is how often retention runs; PruneBatch bounds the rows
	// one pruning transaction examines.
	PruneInterval time.Duration
	PruneBatch    int
	// CacheBytes budgets the in-memory copy of the live keys that serves
	// latest-revision reads (single-process dialects only): 0 takes
	// DefaultCacheBytes, a negative value turns it off.
	CacheBytes int64
}

// DefaultCacheBytes is the current-state cache's default budget.
const DefaultCacheBytes = 256 << 20

// Store is the revision log and the etcd semantics on top of it.
type Store struct {
	d      Dialect
	opts   Options
	log    *slog.Logger
	wdb    *sql.DB // exactly one connection: the writer's
	rdb    *sql.DB
	q      queries
	wstmts *stmtCache
	rstmts *stmtCache
	hub    *Hub
	leases *leaseTable
	// sh and tail are set when several processes may write the database.
	sh   Shared
	tail *tailer

	memberID, clusterID uint64

	// committed is the newest durable revision; compact the floor that
	// Compact set. Both are written only by the writer goroutine.
	committed   atomic.Int64
	compact     atomic.Int64
	retainFloor atomic.Int64
	logStartMs  atomic.Int64 // the first commit's time, once known (history.go)
	rules       []*retentionRule
	pruneMu     sync.Mutex
	// cache, when set, answers latest-revision reads (cache.go).
	cache atomic.Pointer[currentCache]

	reqs      chan *writeReq
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
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
	if opts.CacheBytes == 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	wdb, rdb, err := d.Open(ctx)
	if err != nil {
		return nil, err
	}
	s := &Store{
		d: d, opts: opts, log: opts.Logger, wdb: wdb, rdb: rdb,
		q:      newQueries(d),
		wstmts: newStmtCache(wdb, d),
		rstmts: newStmtCache(rdb, d),
		reqs:   make(chan *writeReq, 4096),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if sh, ok := d.(Shared); ok {
		s.sh = sh
	}
	if err := s.migrate(ctx); err != nil {
		return nil, s.abandon(err)
	}
	st, err := s.loadState(ctx)
	if err != nil {
		return nil, s.abandon(err)
	}
	if err := s.initRules(ctx); err != nil {
		return nil, s.abandon(err)
	}
	s.committed.Store(st.rev)
	s.compact.Store(st.compact)
	s.memberID, s.clusterID = uint64(st.member), uint64(st.cluster)
	s.hub = newHub(st.rev, opts.RingBytes)
	s.leases = newLeaseTable(opts.Now)
	for id, ttl := range st.leases {
		// etcd gives every lease its full TTL again after a leader change;
		// a restart is the same event here.
		s.leases.add(id, ttl)
	}
	if s.sh != nil {
		// The database is the authority on revisions, floors and leases.
		s.tail = newTailer(s, s.sh)
		if err := s.tail.syncLeases(ctx); err != nil {
			return nil, s.abandon(err)
		}
		s.tail.start()
	}
	if s.sh == nil {
		// One writer connection: statements prepared on it now are reused
		// by every batch's transaction without being parsed again.
		if err := s.wstmts.warm(ctx, hotWriterSQL...); err != nil {
			return nil, s.abandon(err)
		}
	}
	if s.sh == nil && opts.CacheBytes > 0 {
		// Before the writer starts, so nothing changes while it loads.
		c, err := loadCache(ctx, wdb, st.rev, opts.CacheBytes)
		if err != nil {
			return nil, s.abandon(fmt.Errorf("load the current-state cache: %w", err))
		}
		if c == nil {
			s.log.Warn("the live keys exceed the current-state cache budget: reads go to the database", "cache_bytes", opts.CacheBytes)
		} else {
			s.cache.Store(c)
			s.log.Info("current-state cache loaded", "keys", c.tree.Len(), "bytes", c.bytes, "budget", opts.CacheBytes)
		}
	}
	w := newWriter(s, st)
	go w.run()
	go s.expireLeases()
	go s.pruneLoop()
	return s, nil
}

// Close finishes the requests already queued, then closes the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
		// A closed store answers nothing, not even from memory.
		s.cache.Store(nil)
		if s.tail != nil {
			s.tail.close()
		}
		s.hub.close()
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
	s.wdb.Close()
	s.rdb.Close()
	if c, ok := s.d.(io.Closer); ok {
		c.Close()
	}
	return err
}

// MemberID and ClusterID are random, fixed when the database was created.
func (s *Store) MemberID() uint64  { return s.memberID }
func (s *Store) ClusterID() uint64 { return s.clusterID }

// Rev is the newest committed revision.
func (s *Store) Rev() int64 { return s.committed.Load() }

// CompactRev is the floor set by Compact.
func (s *Store) CompactRev() int64 { return s.compact.Load() }

// Hub is where committed events are published for watchers.
func (s *Store) Hub() *Hub { return s.hub }

// DBSize reports the database size and the part of it in use.
func (s *Store) DBSize(ctx context.Context) (total, inUse int64, err error) {
	return s.d.Size(ctx, s.rdb)
}

func randomID() int64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if s.sh != nil {
		if err := s.sh.LockMigrate(ctx, tx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS meta (name VARCHAR(64) NOT NULL PRIMARY KEY, value BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int64
	err = tx.QueryRowContext(ctx, s.d.Bind(`SELECT value FROM meta WHERE name = 'schema'`)).Scan(&have)
	if errors.Is(err, sql.ErrNoRows) {
		have = 0
	} else if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	steps := s.d.Migrations()
	if have > int64(len(steps)) {
		return fmt.Errorf("database schema version %d is newer than this quantykube understands (%d): refusing to start", have, len(steps))
	}
	if have == int64(len(steps)) {
		return nil
	}
	for v := have; v < int64(len(steps)); v++ {
		for _, stmt := range steps[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate to schema %d: %w", v+1, err)
			}
		}
		s.log.Info("migrated schema", "dialect", s.d.Name(), "version", v+1)
	}
	if have == 0 {
		// An empty store is at revision 1, as etcd's is.
		for name, value := range map[string]int64{"rev": 1, "compact": 0, "member_id": randomID(), "cluster_id": randomID(), "last_unix_ms": 0} {
			if _, err := tx.ExecContext(ctx, s.d.Bind(`INSERT INTO meta (name, value) VALUES (?, ?)`), name, value); err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.d.Bind(`INSERT INTO meta (name, value) VALUES ('schema', ?)`), int64(len(steps))); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	} else if _, err := tx.ExecContext(ctx, s.d.Bind(`UPDATE meta SET value = ? WHERE name = 'schema'`), int64(len(steps))); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return tx.Commit()
}

type persisted struct {
	rev, compact, member, cluster, lastUnixMs int64
	leases                                    map[int64]int64
}

func (s *Store) loadState(ctx context.Context) (persisted, error) {
	st := persisted{leases: map[int64]int64{}}
	rows, err := s.wdb.QueryContext(ctx, `SELECT name, value FROM meta`)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			rows.Close()
			return st, err
		}
		switch name {
		case "rev":
			st.rev = v
		case "compact":
			st.compact = v
		case "member_id":
			st.member = v
		case "cluster_id":
			st.cluster = v
		case "last_unix_ms":
			st.lastUnixMs = v
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	rows, err = s.wdb.QueryContext(ctx, `SELECT id, ttl FROM leases`)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, ttl int64
		if err := rows.Scan(&id, &ttl); err != nil {
			return st, err
		}
		st.leases[id] = ttl
	}
	return st, rows.Err()
}
