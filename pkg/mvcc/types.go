// Package drivers is QuantyKube's SQL revision log: one core that implements
// etcd's MVCC semantics over two tables (log: every change; current: the live
// state) and a small Dialect per database engine.
package mvcc

import (
	"bytes"
	"context"
	"database/sql"
	"errors"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Errors the core returns; pkg/endpoint maps them to etcd's exact gRPC errors.
var (
	ErrCompacted      = errors.New("mvcc: required revision has been compacted")
	ErrFutureRev      = errors.New("mvcc: required revision is a future revision")
	ErrKeyNotFound    = errors.New("key not found")
	ErrValueProvided  = errors.New("value is provided")
	ErrLeaseProvided  = errors.New("lease is provided")
	ErrLeaseNotFound  = errors.New("requested lease not found")
	ErrLeaseExists    = errors.New("lease already exists")
	ErrLeaseTTLTooBig = errors.New("too large lease TTL")
	ErrDuplicateKey   = errors.New("duplicate key given in txn request")
	ErrTooManyOps     = errors.New("too many operations in txn request")
	ErrEmptyKey       = errors.New("key is not provided")
	ErrInvalidSort    = errors.New("invalid sort option")
	ErrClosed         = errors.New("store is closed")
)

// Event is one change of one key, as the watch API delivers it. Events and
// their KeyValues are shared (watchers, the ring, the current-state cache)
// and read-only.
type Event struct {
	Type   mvccpb.Event_EventType
	Kv     *mvccpb.KeyValue // for a delete: key and mod_revision only
	PrevKv *mvccpb.KeyValue // nil on create
	UnixMs int64
}

// Rev is the revision that made the change.
func (e *Event) Rev() int64 { return e.Kv.ModRevision }

// Size approximates the bytes the event occupies in memory and on the wire.
func (e *Event) Size() int {
	n := 64 + len(e.Kv.Key) + len(e.Kv.Value)
	if e.PrevKv != nil {
		n += 48 + len(e.PrevKv.Key) + len(e.PrevKv.Value)
	}
	return n
}

// KeyRange is etcd's [Key, End) with its conventions already resolved:
// End == nil means the single key Key; Unbounded means every key >= Key.
type KeyRange struct {
	Key       []byte
	End       []byte
	Unbounded bool
}

// NewKeyRange applies etcd's range_end rules: empty is a single key, "\x00"
// is everything from key on.
func NewKeyRange(key, end []byte) KeyRange {
	switch {
	case len(end) == 0:
		return KeyRange{Key: key}
	case len(end) == 1 && end[0] == 0:
		return KeyRange{Key: key, Unbounded: true}
	default:
		return KeyRange{Key: key, End: end}
	}
}

// Single reports whether the range names exactly one key.
func (r KeyRange) Single() bool { return r.End == nil && !r.Unbounded }

// Empty reports whether no key can fall in the range (end <= key).
func (r KeyRange) Empty() bool {
	return r.End != nil && bytes.Compare(r.End, r.Key) <= 0
}

// Contains reports whether k is in the range.
func (r KeyRange) Contains(k []byte) bool {
	c := bytes.Compare(k, r.Key)
	switch {
	case c < 0:
		return false
	case r.Unbounded:
		return true
	case r.End == nil:
		return c == 0
	default:
		return bytes.Compare(k, r.End) < 0
	}
}

// Overlaps reports whether two ranges share a key.
func (r KeyRange) Overlaps(o KeyRange) bool {
	if r.Single() {
		return o.Contains(r.Key)
	}
	if o.Single() {
		return r.Contains(o.Key)
	}
	// [a1,a2) and [b1,b2) overlap iff a1 < b2 and b1 < a2 (unbounded = +inf).
	less := func(k []byte, x KeyRange) bool { return x.Unbounded || bytes.Compare(k, x.End) < 0 }
	return less(r.Key, o) && less(o.Key, r)
}

// Dialect is what differs between database engines. The core writes
// portable SQL with ? placeholders; Bind rewrites them where needed.
type Dialect interface {
	Name() string
	// Open returns a pool for the single writer and a pool for readers.
	Open(ctx context.Context) (writer, reader *sql.DB, err error)
	// Migrations are the schema versions in order: Migrations()[i] takes
	// the schema from version i to i+1.
	Migrations() [][]string
	// Bind rewrites ? placeholders to the engine's own.
	Bind(query string) string
	// LogByRev is the log table as a FROM item read through its (rev, sub)
	// index, for "keys changed since revision R": a planner that scans the
	// (key, rev) index instead reads the whole history.
	LogByRev(alias string) string
	// Size reports the database's size on disk and the part of it in use.
	Size(ctx context.Context, db *sql.DB) (total, inUse int64, err error)
	// Defragment returns free space to the operating system.
	Defragment(ctx context.Context, db *sql.DB) error
}
