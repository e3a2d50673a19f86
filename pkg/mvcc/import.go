package mvcc

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Import fills an empty store with the live keys of another store that
// speaks the etcd API (etcd, kine), keeping their revisions: each key keeps
// its create and mod revision, and the store's revision becomes the
// source's, so that clients holding resourceVersions (kube-apiserver's
// watch cache, informers) carry on as if nothing had moved.
//
// Only the state at the source's revision is imported, not its history: the
// store's floors (the etcd API's and History's) start at that revision, as
// if retention had pruned everything before it, and meta records the
// import (imported_rev, imported_unix_ms). Each key gets one log row at its
// mod revision, committed at the time of the import.
//
// Everything is written in one transaction, so an import either fills the
// store or leaves it as it was: a failed import can be run again. The
// store must not be open elsewhere: SQLite's lock refuses it, and on a
// shared database ReplicaDialect.LockImport refuses while a server is connected,
// and servers opening the store are refused until the import ends.
type Import struct {
	ctx    context.Context
	d      Dialect
	sql    *Statements
	sh     ReplicaDialect
	wdb    *sql.DB
	rdb    *sql.DB
	tx     *sql.Tx
	put    *sql.Stmt // SQLite: a log row
	cur    *sql.Stmt // SQLite: a current row
	now    int64
	closed bool

	// Writes held back for one WriteBatch (a ReplicaDialect).
	pend      BatchWrites
	pendBytes int

	stats   ImportStats
	last    []byte
	subs    map[int64]int64 // rev -> next sub: etcd writes several keys at one revision
	leases  map[int64]int64 // declared: id -> ttl
	attach  map[int64]bool  // leases the keys are attached to
	maxMod  int64
	hasLast bool
}

// ImportOptions tune an import.
type ImportOptions struct {
	// DryRun checks everything Import checks without opening the database
	// (the Dialect may be nil): nothing is written anywhere.
	DryRun bool
	Logger *slog.Logger
	// Now is the clock (tests); nil is the wall clock.
	Now func() time.Time
}

// ImportStats is what an import wrote (or would have written).
type ImportStats struct {
	Keys       int64
	KeyBytes   int64
	ValueBytes int64
	Leases     int64
	// Rev is the store's revision after the import (0 until Commit).
	Rev int64
}

// importChunk bounds the rows and bytes held back for one WriteBatch.
const (
	importChunkRows  = 4096
	importChunkBytes = 16 << 20
)

// BeginImport opens the database d names, checks that it holds nothing but
// a store's tables (a wrong endpoint, kine's database or the source itself,
// is refused before anything is written to it), brings the schema up to
// date and checks that the store is empty: revision 1, no keys, no
// history, no leases. Close ends the import, rolling back unless Commit
// succeeded.
func BeginImport(ctx context.Context, d Dialect, opts ImportOptions) (*Import, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	im := &Import{ctx: ctx, d: d, now: opts.Now().UnixMilli(), subs: map[int64]int64{}, leases: map[int64]int64{}, attach: map[int64]bool{}}
	if opts.DryRun {
		// No target: nothing to run SQL on (d may be nil).
		return im, nil
	}
	st := d.Statements()
	if err := st.check(isReplica(d)); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	im.sql = st
	var err error
	// Before Open, which may write (SQLite switches the file to WAL).
	if err := checkOwnTables(ctx, d); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	if im.wdb, im.rdb, err = d.Open(ctx); err != nil {
		return nil, fmt.Errorf("import: open the target: %w", err)
	}
	sh, _ := d.(ReplicaDialect)
	// migrate needs only the store's connections, dialect, statements and
	// logger.
	s := &Store{d: d, sql: st, wdb: im.wdb, rdb: im.rdb, log: opts.Logger}
	if err := s.migrate(ctx, sh); err != nil {
		im.Close()
		return nil, fmt.Errorf("import: %w", err)
	}
	if err := im.begin(sh); err != nil {
		im.Close()
		return nil, fmt.Errorf("import: %w", err)
	}
	return im, nil
}

// checkOwnTables refuses a database that holds tables the store does not
// make.
func checkOwnTables(ctx context.Context, d Dialect) error {
	names, err := d.Tables(ctx)
	if err != nil {
		return fmt.Errorf("list the target's tables: %w", err)
	}
	own := ownTables(d)
	var foreign []string
	for _, n := range names {
		if !own[strings.ToLower(n)] {
			foreign = append(foreign, n)
		}
	}
	if len(foreign) > 0 {
		sort.Strings(foreign)
		return fmt.Errorf("the target database holds tables that are not QuantyKube's (%s): name an empty database or a QuantyKube store as the target, not the source", strings.Join(foreign, ", "))
	}
	return nil
}

// ownTables are the tables a store has: meta, and those its migrations
// create.
func ownTables(d Dialect) map[string]bool {
	own := map[string]bool{"meta": true}
	for _, step := range d.Migrations() {
		for _, stmt := range step {
			if m := createTableRE.FindStringSubmatch(stmt); m != nil {
				own[strings.ToLower(m[1])] = true
			}
		}
	}
	return own
}

var createTableRE = regexp.MustCompile(`(?i)^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)`)

func (im *Import) begin(sh ReplicaDialect) error {
	tx, err := im.wdb.BeginTx(im.ctx, nil)
	if err != nil {
		return err
	}
	im.tx = tx
	rev := int64(-1)
	if sh != nil {
		// First: an import writes a store no server may be serving, and
		// no server opens it until this transaction ends.
		if err := sh.LockImport(im.ctx, tx); err != nil {
			return err
		}
		// The batch lock: no replica commits until the import has.
		im.sh = sh
		st, _, err := sh.LockBatch(im.ctx, tx, nil)
		if err != nil {
			return fmt.Errorf("lock the target: %w", err)
		}
		rev = st.Rev
	} else if err := tx.QueryRowContext(im.ctx, im.sql.Meta.Rev).Scan(&rev); err != nil {
		return fmt.Errorf("read the target's revision: %w", err)
	}
	var keys, rows, leases, imported int64
	err = tx.QueryRowContext(im.ctx, im.sql.Import.Size).Scan(&keys, &rows, &leases, &imported)
	if err != nil {
		return fmt.Errorf("read the target's size: %w", err)
	}
	if imported != 0 {
		return errors.New("the target holds an import already: import fills only a new store")
	}
	if rev != 1 || keys != 0 || rows != 0 || leases != 0 {
		return fmt.Errorf("the target is not empty (revision %d, %d keys, %d log rows, %d leases): import fills only a new store", rev, keys, rows, leases)
	}
	if sh == nil {
		if im.put, err = tx.PrepareContext(im.ctx, im.sql.Import.InsertPut); err != nil {
			return err
		}
		if im.cur, err = tx.PrepareContext(im.ctx, im.sql.Import.InsertCurrent); err != nil {
			return err
		}
	}
	return nil
}

// Put imports one live key. Keys come in ascending byte order, each once;
// a key's revisions satisfy 1 <= CreateRevision <= ModRevision and its
// Version is at least 1. A key attached to a lease needs that lease
// declared (Lease) before Commit.
func (im *Import) Put(kv *mvccpb.KeyValue) error {
	switch {
	case im.closed:
		return errors.New("import: already ended")
	case len(kv.Key) == 0:
		return errors.New("import: a key is empty")
	case im.hasLast && bytes.Compare(kv.Key, im.last) <= 0:
		return fmt.Errorf("import: key %q after %q: keys must come once each, in ascending order", kv.Key, im.last)
	case kv.CreateRevision < 1 || kv.ModRevision < kv.CreateRevision:
		return fmt.Errorf("import: key %q: create revision %d and mod revision %d: want 1 <= create <= mod", kv.Key, kv.CreateRevision, kv.ModRevision)
	case kv.Version < 1:
		return fmt.Errorf("import: key %q: version %d: a live key's version is at least 1", kv.Key, kv.Version)
	case kv.Lease < 0:
		return fmt.Errorf("import: key %q: lease %d is negative", kv.Key, kv.Lease)
	}
	im.last, im.hasLast = append(im.last[:0], kv.Key...), true
	im.maxMod = max(im.maxMod, kv.ModRevision)
	if kv.Lease != 0 {
		im.attach[kv.Lease] = true
	}
	sub := im.subs[kv.ModRevision]
	im.subs[kv.ModRevision] = sub + 1
	value := kv.Value
	if value == nil {
		value = []byte{}
	}
	im.stats.Keys++
	im.stats.KeyBytes += int64(len(kv.Key))
	im.stats.ValueBytes += int64(len(value))
	if im.tx == nil {
		return nil
	}
	if im.sh == nil {
		if _, err := im.put.ExecContext(im.ctx, kv.ModRevision, sub, kv.Key, value, kv.CreateRevision, kv.Version, kv.Lease, im.now); err != nil {
			return fmt.Errorf("import: write key %q: %w", kv.Key, err)
		}
		if _, err := im.cur.ExecContext(im.ctx, kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease); err != nil {
			return fmt.Errorf("import: write key %q: %w", kv.Key, err)
		}
		return nil
	}
	row := &mvccpb.KeyValue{Key: bytes.Clone(kv.Key), Value: bytes.Clone(value), CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
	im.pend.Log = append(im.pend.Log, LogRow{Rev: row.ModRevision, Sub: sub, Key: row.Key, Value: row.Value, CreateRev: row.CreateRevision, Version: row.Version, Lease: row.Lease})
	im.pend.Put = append(im.pend.Put, row)
	im.pendBytes += putBytes(row.Key, row.Value)
	if len(im.pend.Put) >= importChunkRows || im.pendBytes >= importChunkBytes {
		return im.flush()
	}
	return nil
}

// flush sends the rows held back, in one statement.
func (im *Import) flush() error {
	if im.sh == nil || im.pend.empty() {
		return nil
	}
	im.pend.UnixMs = im.now
	if err := im.sh.WriteBatch(im.ctx, im.tx, &im.pend); err != nil {
		return fmt.Errorf("import: write %d keys: %w", len(im.pend.Put), err)
	}
	im.pend = BatchWrites{Log: im.pend.Log[:0], Put: im.pend.Put[:0]}
	im.pendBytes = 0
	return nil
}

// Lease imports a lease. Its TTL is raised to MinLeaseTTL, as a grant's
// is; its deadline starts when a server opens the store, as after a
// restart: on SQLite every open starts deadlines (lease.go); on a shared
// database, where deadlines live in the database, the first server to open
// the store starts them (startImportedLeases), not the import's clock.
func (im *Import) Lease(id, ttl int64) error {
	switch {
	case im.closed:
		return errors.New("import: already ended")
	case id <= 0:
		return fmt.Errorf("import: lease ID %d: want a positive ID", id)
	case ttl > MaxLeaseTTL:
		return fmt.Errorf("import: lease %d: TTL %d is over the maximum %d", id, ttl, int64(MaxLeaseTTL))
	}
	if _, ok := im.leases[id]; ok {
		return fmt.Errorf("import: lease %d given twice", id)
	}
	ttl = max(ttl, MinLeaseTTL)
	im.leases[id] = ttl
	im.stats.Leases++
	if im.tx == nil {
		return nil
	}
	if _, err := im.tx.ExecContext(im.ctx, im.sql.Lease.Insert, id, ttl); err != nil {
		return fmt.Errorf("import: write lease %d: %w", id, err)
	}
	return nil
}

// Commit sets the store's revision to rev (at least every imported mod
// revision) and its floors to rev, and commits.
func (im *Import) Commit(rev int64) (ImportStats, error) {
	if im.closed {
		return im.stats, errors.New("import: already ended")
	}
	if rev < max(im.maxMod, 1) {
		return im.stats, fmt.Errorf("import: revision %d is older than a key's mod revision %d", rev, im.maxMod)
	}
	for id := range im.attach {
		if _, ok := im.leases[id]; !ok {
			return im.stats, fmt.Errorf("import: keys are attached to lease %d, which was not imported", id)
		}
	}
	im.stats.Rev = rev
	if im.tx == nil {
		im.closed = true
		return im.stats, nil
	}
	if err := im.commit(rev); err != nil {
		return im.stats, fmt.Errorf("import: %w", err)
	}
	im.tx = nil
	return im.stats, im.Close()
}

func (im *Import) commit(rev int64) error {
	ctx, tx := im.ctx, im.tx
	if im.sh != nil {
		im.pend.SetRev, im.pend.Rev = true, rev
		if err := im.flush(); err != nil {
			return err
		}
	} else {
		if _, err := tx.ExecContext(ctx, im.sql.Import.SetRev, rev); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, im.sql.Import.SetLastUnixMs, im.now); err != nil {
			return err
		}
	}
	// What came before rev is not here: to the etcd API it is pruned
	// history (reads and watches below rev answer "compacted"), and every
	// retention rule's History floor starts at rev (retention.go).
	if _, err := tx.ExecContext(ctx, im.sql.Import.SetRetainFloor, rev); err != nil {
		return err
	}
	marks := map[string]int64{"imported_rev": rev, "imported_unix_ms": im.now}
	if im.sh != nil && len(im.leases) > 0 {
		marks[importedLeasesPending] = 1
	}
	for name, v := range marks {
		if _, err := tx.ExecContext(ctx, im.sql.Import.InsertMeta, name, v); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// importedLeasesPending is meta's mark that the leases an import wrote
// have not been started by a server yet (shared databases).
const importedLeasesPending = "imported_leases_pending"

// startImportedLeases starts the deadlines of the leases an import wrote,
// once, at the first open after it: the database stamped them at the
// import, and a lease shorter than the time between the import and the
// start would have ended before any server served it. Of replicas opening
// at once, the one whose DELETE takes the mark starts them.
func (s *Store) startImportedLeases(ctx context.Context, sh ReplicaDialect) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.sql.Import.DeleteMeta, importedLeasesPending)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	if err := sh.StartLeases(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.log.Info("started the imported leases' deadlines")
	return nil
}

// Stats is what has been imported so far.
func (im *Import) Stats() ImportStats { return im.stats }

// Close ends the import: a transaction not committed is rolled back and
// the store stays as it was. It closes the database.
func (im *Import) Close() error {
	im.closed = true
	if im.put != nil {
		im.put.Close()
	}
	if im.cur != nil {
		im.cur.Close()
	}
	if im.tx != nil {
		im.tx.Rollback()
		im.tx = nil
	}
	var err error
	if im.wdb != nil {
		err = errors.Join(im.wdb.Close(), im.rdb.Close())
		im.wdb, im.rdb = nil, nil
		if c, ok := im.d.(interface{ Close() error }); ok {
			err = errors.Join(err, c.Close())
		}
	}
	return err
}
