// Package mvcc is QuantyKube's storage engine: etcd's multi-version
// key-value semantics over SQL tables (log: every change; current: the
// live keys), with a thin Dialect per database in pkg/drivers, which
// writes every statement the engine runs in its own syntax. It speaks
// etcd's request and response types but knows nothing of gRPC: pkg/server
// serves it as the etcd v3 API, pkg/history as quantykube.History.
//
// The interfaces below are the contract the servers depend on; *Store
// implements all of them. Files are one concern each. Where the databases
// differ, the file says which it serves: _sqlite files run only where this
// process is the database's one writer (SQLite), replica files and tail.go
// only where replicas share it (PostgreSQL, MySQL: a ReplicaDialect), and
// the store's fields for them sit behind Store.replica, nil on SQLite.
//
//	kv.go                    the interfaces (this file)
//	store.go                 Store, Options, Open and Close
//	dialect.go               what a database driver provides (pkg/drivers/*)
//	statements.go            the statements a dialect writes for the engine, by area (ADR-039)
//	stmt.go                  running them: prepared once per pool, when the store opens
//	schema.go                the tables and their migrations
//	writer.go                the single writer: queue, batches, answers
//	batch.go                 a batch's transaction, and the two kinds of it:
//	batch_sqlite.go            SQLite's: each row written as it is made
//	delete_sqlite.go           its range deletes
//	batch_replica.go           the replicas': writes held back, sent with COMMIT
//	batch_replica_assume.go    what a replica batch assumes instead of reading
//	txn.go                   Txn evaluation over a batch's state
//	txn_check.go             etcd's static checks of a request
//	publish.go               making a committed batch visible (one writer)
//	replica.go               what a store keeps only where replicas share the database
//	tail.go                  following the log that replicas write
//	range.go                 Range and Count
//	range_sql.go             which statement a Range runs when the live index cannot answer
//	index.go                 the live index of the live keys (ADR-008)
//	index_replica.go         the live index where replicas share the database (ADR-016)
//	index_values.go          which values the live index holds, and reading the others (ADR-041)
//	hub.go                   watch events: the ring and its followers
//	event.go                 one change as watchers see it
//	logread.go               changes read back from the log (watch catch-up, tail)
//	logpage.go               History's Log pages, bounded in bytes (ADR-020)
//	logscan.go               Log pages filtered by key, newest first or up to a revision (ADR-031)
//	rangeat.go               History's Get of a range at a revision, in pages
//	history.go               History's floors and reads at a revision or a time
//	retention.go             pruning the log and the floors it raises (ADR-005)
//	budget.go                retention's byte budgets: what each rule's history weighs (ADR-030)
//	usage.go                 what each key's retained history weighs (history top)
//	regress.go               a database behind the revisions handed out (ADR-027)
//	lease.go                 leases: grants, deadlines, expiry
//	import.go                filling an empty store from another etcd-API store
//	keyrange.go              etcd's [key, range_end) resolved
//	errors.go                etcd's refusals and the store's failures
//	health.go                the checks behind the health endpoints
//	hash.go                  the state hash, one definition on every database (ADR-046)
//	quota.go                 the space quota and the alarms kept in meta (ADR-049)
//	reader.go                a store opened read-only beside its server (check hash)
//	reader_status.go         what a store's database holds, read without a server (status --endpoint)
//	reader_live.go           the live state at one revision, in pages (export --etcd-snapshot, ADR-051)
//	migrate.go               copying a store with its history to another database (ADR-050)
//	migrate_sql.go           migrate's statements, one text for every dialect
//	migrate_target.go        migrate's target: the checks, the mark, the batches
package mvcc

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ReadView reads the store at one revision.
//
// Revisions: the store starts empty at revision 1. Every request that
// changes something (however many keys) takes exactly the next revision;
// a request that changes nothing (a failed compare, a delete of absent
// keys, a read) takes none. Every answer carries the revision of the
// state it was read from or left behind.
//
// The revision an answer reports is one that every read starting after
// the answer returns sees, a read of the latest state included; and an
// answer shows no change of a later revision (ADR-037). A batch becomes
// visible in two steps, the database's commit and then its publish to the
// live index, the Hub and Rev (publish.go, tail.go); its revision may be
// reported only once both are done, and every path keeps to that:
//
//   - A write (a Txn, read-only ones included, Compact, a lease grant or
//     revoke) is answered after its batch is published; where replicas
//     share the database, after its commit at least (see below).
//   - A read of the live index reports the index's revision, published.
//   - A read in SQL on SQLite answers at the published revision when its
//     snapshot holds a batch not yet published (Store.shownRev): the
//     revision is loaded after the snapshot began, so the snapshot holds
//     it, and at the latest state the read answers as a past revision.
//   - A read in SQL where replicas share the database reports the
//     database's revision: a read of the latest state first asks the
//     database for its revision and waits for the live index to reach it
//     (index_replica.go), and a read without the index reads the
//     database itself. Serializable reads skip that wait, as etcd's do,
//     and may report an older revision.
//   - Watch responses report the Hub's revision, published last.
//   - History reports Rev, and its Log pages stop at it; its reads by
//     time answer at most Rev.
type ReadView interface {
	// Rev is the newest published revision: every read that starts after
	// Rev returns sees it.
	Rev() int64

	// Range reads the keys of r at r.Revision (0: the latest), with
	// etcd's conventions: an empty RangeEnd is the single key Key, "\x00"
	// every key >= Key, anything else [Key, RangeEnd); an empty Key is
	// ErrEmptyKey. Count is the number of keys in the range at that
	// revision whatever the limit and filters, and More reports keys left
	// out by Limit. A revision below Floor is ErrCompacted, above Rev
	// ErrFutureRev. The answer is the caller's, but the bytes of keys and
	// values may be shared with the store and must not be written.
	Range(ctx context.Context, r *pb.RangeRequest) (*RangeResult, error)
}

// KV is etcd's key-value store: reads, and writes that each take one
// revision.
type KV interface {
	ReadView

	// Txn evaluates r's compares against the state before it, then
	// applies Success if all hold and Failure otherwise; Put and
	// DeleteRange arrive as one-op Txns. A failed compare is not an error:
	// the answer has Succeeded false and the Failure branch's results.
	// Nested Txns pick their branches against the same state. The
	// revision moves by one if anything changed. An error is either a
	// refusal etcd would give (errors.go: Refused reports it; nothing was
	// written) or a failure of the store (ErrClosed, a database error)
	// whose write may or may not have been applied, as with etcd. When ctx
	// ends first, the write is applied only if the writer had begun its
	// batch: one still queued is dropped (writer.go).
	Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error)

	// Compact sets the floor below which reads answer ErrCompacted, and
	// returns the revision. It removes nothing: history stays until
	// retention prunes it. Compacting at or below the floor is
	// ErrCompacted, above Rev ErrFutureRev.
	Compact(ctx context.Context, rev int64) (int64, error)

	// Floor is the etcd API's floor: the higher of Compact's floor and the
	// retention floor (retention.go).
	Floor() int64
}

// WatchableKV is a KV whose committed changes can be followed.
type WatchableKV interface {
	KV

	// Published is the newest revision whose events Events can return,
	// and a channel closed when a newer one is published (or the store
	// closes, when closed is true). It never runs ahead of Rev.
	Published() (rev int64, newer <-chan struct{}, closed bool)

	// Events returns the committed events with from <= revision <= through
	// on keys in kr, in (revision, change) order, each with its prev_kv
	// (nil on a create). through is to unless the events had to be read
	// back from the log and those up to to would hold more memory than a
	// bound: then it is the last revision read, never less than from, and
	// the caller asks again from through+1. When the history from `from`
	// on has been pruned it returns a *BelowFloorError, whose Floor is
	// where a watcher may resume.
	Events(ctx context.Context, from, to int64, kr KeyRange) (evs []*Event, through int64, err error)

	// Follow registers a reader of Events that says where it stands, so
	// that the events it has yet to read and memory still holds stay there
	// (up to Options.RingBytes), while those every follower has read may
	// go. Close it when done.
	Follow() Follower

	// RetainFloor is the highest retention floor: a watcher below it may
	// have missed pruned events.
	RetainFloor() int64
}

// Follower is a reader of WatchableKV.Events, a watch stream.
type Follower interface {
	// At says the oldest revision the follower will ask for next
	// (math.MaxInt64: none). It may move back, as when a stream gains a
	// watch that starts in the past; events already gone from memory are
	// read from the log as before.
	At(rev int64)
	Close()
}

// Lessor keeps etcd's leases: TTLs, and keys that go when one expires.
type Lessor interface {
	// Grant creates a lease; ID 0 lets the store choose one. The TTL is
	// raised to MinLeaseTTL; over MaxLeaseTTL is ErrLeaseTTLTooBig, an ID in
	// use ErrLeaseExists. It takes no revision.
	Grant(ctx context.Context, g LeaseGrant) (Lease, error)
	// Revoke deletes the lease and, in one revision, every key attached to
	// it (none: no revision). An unknown lease is ErrLeaseNotFound.
	Revoke(ctx context.Context, id int64) (rev int64, err error)
	// Renew restarts the lease's TTL and returns it; an unknown or
	// expired lease is ErrLeaseNotFound.
	Renew(ctx context.Context, id int64) (ttl int64, err error)
	// TimeToLive reports a lease, with its keys when keys is set.
	TimeToLive(ctx context.Context, id int64, keys bool) (*LeaseInfo, error)
	// Leases lists every live lease ID in order.
	Leases() []int64
}

// Maintenance is the store's identity and housekeeping.
type Maintenance interface {
	// MemberID and ClusterID are random, fixed when the database was created.
	MemberID() uint64
	ClusterID() uint64
	// DBSize is the database's size and the part of it in use.
	DBSize(ctx context.Context) (total, inUse int64, err error)
	// Defragment reclaims the space of deleted and pruned rows, as the
	// dialect can (Dialect.Defragment).
	Defragment(ctx context.Context) error
	// Hash is the state hash at a revision (hash.go, ADR-046): a revision
	// below Floor is ErrCompacted, above Rev ErrFutureRev.
	Hash(ctx context.Context, q HashQuery) (*HashResult, error)
	// CheckQuota admits or refuses (ErrNoSpace) a request that grows the
	// store by an estimated cost; QuotaBytes is the quota (0: none) and
	// QuotaSize the database size it last measured (quota.go, ADR-049).
	CheckQuota(ctx context.Context, cost int64) error
	QuotaBytes() int64
	QuotaSize() int64
	// Alarms lists the active alarms of a type (NONE: all); Activate and
	// Deactivate change one in the database, as etcd's Alarm RPC does.
	Alarms(ctx context.Context, t pb.AlarmType) []*pb.AlarmMember
	ActivateAlarm(ctx context.Context, member uint64, t pb.AlarmType) (*pb.AlarmMember, error)
	DeactivateAlarm(ctx context.Context, member uint64, t pb.AlarmType) (*pb.AlarmMember, error)
}

// Backend is everything the etcd v3 API serves.
type Backend interface {
	WatchableKV
	Lessor
	Maintenance
}

// History reads what the store retains (quantykube.History). Times are
// Unix milliseconds of commits; a revision or time outside what is
// retained is an *OutOfRangeError.
type History interface {
	// KeyAt is key as it was at rev; nil if it did not exist then.
	KeyAt(ctx context.Context, key []byte, rev int64) (*mvccpb.KeyValue, error)
	// KeyAtTime is the revision committed at or before unixMs (1 before
	// the first write) and key as it was then.
	KeyAtTime(ctx context.Context, key []byte, unixMs int64) (int64, *mvccpb.KeyValue, error)
	// RevisionAt is the revision committed at or before unixMs.
	RevisionAt(ctx context.Context, key []byte, unixMs int64) (int64, error)
	// FirstRevisionFrom is the oldest revision committed at or after
	// unixMs; ok is false when nothing has been committed since. filtered
	// is set for a Log filtered by key (LogQuery.Keep), whose floor is
	// checked key by key.
	FirstRevisionFrom(ctx context.Context, kr KeyRange, unixMs int64, filtered bool) (rev int64, ok bool, err error)
	// RevisionBefore is the newest revision committed before unixMs, for
	// the changes in kr up to that time (exclusive): the current revision
	// when unixMs is in the future, and 0 when nothing was committed before
	// it.
	RevisionBefore(ctx context.Context, kr KeyRange, unixMs int64, filtered bool) (int64, error)
	// Log is one page of the retained changes in a range, oldest first or
	// as the query asks.
	Log(ctx context.Context, q LogQuery) (*LogPage, error)
	// Usage is what each key's retained history weighs, in key order.
	Usage(ctx context.Context, recentMs int64, fn func(KeyUsage) error) error
	// RangeAt is one page of the keys of a range as they were at a
	// revision, in key order.
	RangeAt(ctx context.Context, q RangeAtQuery) (*RangeAtPage, error)
}

var (
	_ Backend = (*Store)(nil)
	_ History = (*Store)(nil)
)
