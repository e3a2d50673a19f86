package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Dialect is what differs between database engines (pkg/drivers/sqlite,
// pkg/drivers/postgres, pkg/drivers/mysql): the connections, the schema,
// and every statement the engine runs, which each dialect writes out in
// its own syntax (Statements, ADR-039).
type Dialect interface {
	Name() string
	// Open returns a pool of exactly one connection for the writer and a
	// pool for readers.
	Open(ctx context.Context) (writer, reader *sql.DB, err error)
	// Migrations are the schema versions in order: Migrations()[i] takes
	// the schema from version i to i+1.
	Migrations() [][]string
	// Statements is every statement the engine runs, in the dialect's
	// syntax. The engine reads it once, when a store or an import opens,
	// and never changes it.
	Statements() *Statements
	// Size reports the database's size on disk and the part of it in use.
	Size(ctx context.Context, db *sql.DB) (total, inUse int64, err error)
	// Defragment reclaims the space of deleted rows: returned to the file
	// system where the database can (SQLite's VACUUM), reusable otherwise.
	Defragment(ctx context.Context, db *sql.DB) error
	// Tables lists the tables (and views) where the store's own are made,
	// reading the database without changing it: an import checks that
	// nothing else is there before it writes anything (import.go).
	Tables(ctx context.Context) ([]string, error)
}

// TextProtocol is implemented by dialects whose driver sends every
// statement as text, its arguments written in (go-sql-driver/mysql's
// interpolateParams), rather than prepared on the server: the engine then
// prepares none and runs each by its text, one round trip, as a prepared
// statement's execution would be. The texts are still the dialect's
// Statements, fixed when the store opens. (MariaDB 10.11 fails the second
// execution of a prepared statement whose correlated subquery reads a
// merged derived table: "Unknown column", ADR-039.)
type TextProtocol interface {
	TextProtocol()
}

// Checkpointer is implemented by dialects that commit to a write-ahead log
// and copy it into the database afterwards (SQLite). Another connection
// copies most of it behind the writer's commits; the writer's connection
// copies what is left after its own commits, which makes the commit's
// caller wait for it but lets the log start over (ADR-015). After a batch
// that wrote a large log (a DeleteRange of many keys) the writer leaves
// the whole copy to the other connection (batch_sqlite.go).
type Checkpointer interface {
	// AutoCheckpoint turns the copy after each commit on or off for the
	// connection ex runs on (the writer's transaction).
	AutoCheckpoint(ctx context.Context, ex Execer, on bool) error
	// Checkpoint copies the log into the database on a connection of db
	// (the readers' pool), without waiting for the writer or readers.
	Checkpoint(ctx context.Context, db *sql.DB) error
}

// OwnedBlobs is implemented by dialects whose database/sql driver returns
// every BLOB (bytea) value of every row in a slice of its own, which it
// never writes again, though database/sql promises that of sql.RawBytes
// only until the next row. Values read from the log are then kept as the
// driver returned them (slab, logread.go): each value read costs one
// allocation of its size instead of two. The dialect's tests check it of
// the driver version the module requires.
type OwnedBlobs interface {
	OwnedBlobs()
}

// LazyRows is implemented by dialects whose database makes each row of a
// query only when the reader asks for it (SQLite, in the process): a read
// that stops early stops the database as well. Other databases
// (PostgreSQL) make and send every row a query's LIMIT allows, and the
// driver reads and discards those the reader does not take.
type LazyRows interface {
	LazyRows()
}

// ReplicaDialect is implemented by dialects whose database several QuantyKube
// processes (replicas) may write at once, such as PostgreSQL. The engine
// then trusts the database, not its memory, between batches (ADR-007):
//
//   - every write batch starts with BeginBatch, which opens the transaction
//     on the writer's connection, takes the database-wide write lock (held
//     until the batch commits) and reads the committed revision, compact
//     floor and last batch time, so revisions are assigned in commit order
//     across replicas with no holes;
//   - a batch's writes are held back and sent with CommitBatch in one
//     statement, pipelined with the COMMIT, which also wakes the other
//     replicas: a batch that reads nothing else costs two round trips;
//   - a batch that can assume what it would read (the writer remembers its
//     rows, batch_replica_assume.go) is one round trip instead: CommitAssumed
//     begins, locks, checks the assumption, writes and commits in one
//     pipeline;
//   - a tailer goroutine feeds the Hub from the log table in revision order,
//     woken by Listen, and follows the compact floor, the retention floors
//     and the lease table (tail.go): every change of them notifies, so the
//     tailer polls only while its LISTEN connection is down;
//   - lease renewals and expiry go through the database, so they agree
//     across replicas.
//
// A dialect without it (SQLite) has exactly one process writing: the
// engine keeps the live index and assigns revisions from memory.
type ReplicaDialect interface {
	// LockMigrate serializes schema migration between processes starting at
	// once, and fails while an import holds LockImport; it runs first in
	// the migration transaction.
	LockMigrate(ctx context.Context, tx *sql.Tx) error
	// LockBatch runs first in every write transaction (an import's). It
	// also returns the current rows of keys (absent keys are left out): the
	// batch's point reads, fetched in the statement that reads the
	// committed state, so that compares cost no round trip each.
	LockBatch(ctx context.Context, q Querier, keys [][]byte) (BatchStart, []*mvccpb.KeyValue, error)
	// BeginBatch begins a transaction on conn (the writer's connection,
	// idle) and runs LockBatch in it, in one round trip. After an error the
	// caller rolls back.
	BeginBatch(ctx context.Context, conn *sql.Conn, keys [][]byte) (BatchStart, []*mvccpb.KeyValue, error)
	// WriteBatch applies w inside the batch's transaction, in as few round
	// trips as the database allows (once per batch, and before any read of
	// the batch's own writes).
	WriteBatch(ctx context.Context, q Querier, w *BatchWrites) error
	// CommitBatch applies w (nil: nothing) as WriteBatch does and commits
	// the transaction BeginBatch began, in one round trip. After an error
	// that wraps ErrRolledBack the batch has not committed; after any
	// other, it may have. Either way the caller rolls back.
	CommitBatch(ctx context.Context, conn *sql.Conn, w *BatchWrites) error
	// CommitAssumed is a whole batch in one round trip, for a batch the
	// writer evaluated without BeginBatch's read: it begins a transaction
	// on conn (idle), takes the write lock, and applies w and commits only
	// if the database holds what a says; else it writes nothing and
	// answers ErrAssumption (ErrAssumedRows when meta held and a key's row
	// did not), the sentinel itself when the transaction is over (nothing
	// to roll back) or wrapped when it may not be. Its other errors are
	// CommitBatch's. A WriterMarker may take meta holding a.Start, Writer
	// included, as proof of the keys a assumes present (Assumption).
	CommitAssumed(ctx context.Context, conn *sql.Conn, a *Assumption, w *BatchWrites) error
	// Notify wakes the other replicas (at commit when ex is a transaction);
	// payload identifies the sender and what changed.
	Notify(ctx context.Context, ex Execer, payload string) error
	// Listen follows the notifications on a connection of its own until
	// ctx ends, reconnecting with backoff: up(true) once a connection
	// listens, wake for every notification it delivers, up(false) once it
	// is lost. While a connection listens, every notification of every
	// transaction committed since reaches wake; what committed before, or
	// while none listened, was missed. It returns early, with an error
	// wrapping ErrNoNotifications, when notifications cannot reach the
	// connection it has (a pooler in transaction mode).
	Listen(ctx context.Context, up func(bool), wake func(payload string)) error
	// Leases reads every lease with the milliseconds it has left.
	Leases(ctx context.Context, db *sql.DB) ([]LeaseRow, error)
	// RenewLease restarts a lease's TTL in the database and sends notify
	// to the other replicas in the same transaction; ok is false (and
	// nothing is sent) when the lease does not exist or has already
	// expired.
	RenewLease(ctx context.Context, db *sql.DB, id int64, notify string) (ttl int64, ok bool, err error)
	// LeaseExpired locks the lease's row inside the writer's transaction and
	// reports whether it exists and its deadline has passed.
	LeaseExpired(ctx context.Context, q Querier, id int64) (bool, error)
	// StartLeases restarts every lease's TTL from the database's clock now.
	StartLeases(ctx context.Context, tx *sql.Tx) error
	// LockImport fails if a server is connected, and refuses every server
	// opening the store until tx (the import's one transaction) ends: an
	// import writes a store no server may be serving. It holds nothing
	// beyond tx, so it works through a pooler in transaction mode.
	LockImport(ctx context.Context, tx *sql.Tx) error
	// Announce tells LockImport, until ctx ends, that this server is up,
	// where Listen's connection cannot (no session of its own behind a
	// pooler), and returns once it has withdrawn the announcement. It
	// also records there the revision the server has applied (applied),
	// for status --endpoint's replicas and their lag.
	Announce(ctx context.Context, applied func() int64)
}

// BatchStart is the committed state a write batch starts from.
type BatchStart struct {
	Rev, Compact, LastUnixMs int64
	// Writer is the mark (BatchWrites.Writer) of the batch that set Rev,
	// where the dialect keeps one (WriterMarker); 0 elsewhere.
	Writer int64
}

// WriterMarker is a ReplicaDialect that keeps in meta, beside the
// revision, the mark of the replica whose batch set it (BatchWrites.Writer,
// random per replica) and reads it back into BatchStart.Writer. A state
// then names the batch that left it, even on a database that lost
// revisions and was written to the same revision again by another
// replica: a batch that finds its replica's last state finds the rows
// that replica remembers, and CommitAssumed need not read them (ADR-035).
type WriterMarker interface {
	ReplicaDialect
	MarksWriter()
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
	// SetRev writes Rev and LastUnixMs (= UnixMs) to meta, and Writer
	// where the dialect keeps it (WriterMarker); SetCompact writes Compact.
	SetRev     bool
	Rev        int64
	Writer     int64
	SetCompact bool
	Compact    int64
	// Notify, when not empty, is sent to the other replicas at commit.
	Notify string
}

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

// ErrNoNotifications is Listen's answer when notifications do not reach
// the connection it listens on: the tailer polls instead.
var ErrNoNotifications = errors.New("notifications do not reach the LISTEN connection")

// ErrRolledBack marks a CommitBatch error after which the batch certainly
// did not commit: its requests may be retried.
var ErrRolledBack = errors.New("the batch was rolled back")

// ErrAssumption is the answer to a batch that found the database not
// holding what it assumed, at its commit (CommitAssumed) or when it began
// its transaction after all (batch_replica_assume.go): nothing was written, and
// the batch must run again from what the database holds.
var ErrAssumption = fmt.Errorf("%w: the database changed since this replica last read it", ErrRolledBack)

// ErrAssumedRows is ErrAssumption when meta held what was assumed and only
// a key's row did not: no other replica committed, and what this replica
// remembers of the other keys still holds (a create of a key that exists,
// which it did not remember).
var ErrAssumedRows = fmt.Errorf("%w: a key's row was not what the batch assumed", ErrAssumption)

// Assumption is what a write batch evaluated without reading the
// database took it to hold (batch_replica_assume.go): the committed state as
// this replica's last batch left it, and the mod_revision of each key's
// current row that the batch read (0: absent). A row's mod_revision names
// all of it, since a revision changes a key at most once. A key assumed
// present is one the replica remembers as its batches left it at Start;
// a key assumed absent may be one it never saw (a create's guess).
type Assumption struct {
	Start   BatchStart
	Keys    [][]byte
	ModRevs []int64
}

// Querier is a connection or a transaction.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Execer is a pool or a transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// isReplica reports whether several processes may write d's database.
func isReplica(d Dialect) bool {
	_, ok := d.(ReplicaDialect)
	return ok
}
