package mvcc

import (
	"context"
	"database/sql"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Reading changes back from the log table: watch catch-up (Events, when
// the Hub's ring no longer holds them), the tailer (tail.go) and History's
// Log (logpage.go). Each change comes with its prev_kv, the key's row
// just before it unless that was a delete.

// eventsFromLog reads the events of [from, to] on kr back from the log,
// or of [from, through] when those would hold more than LogReadBytes: a
// watcher behind by 2,000 revisions of 1 MiB objects, prev_kv and all,
// would otherwise hold 4 GB at once. It stops only between revisions,
// after the first, so a revision larger than the bound is read whole.
func (s *Store) eventsFromLog(ctx context.Context, from, to int64, kr KeyRange) ([]*Event, int64, error) {
	// A catch-up window is a few thousand revisions: the statement reads
	// it by revision, never by scanning the watched prefix's whole history.
	q, args := s.sql.Watch.Events.of(kr), kr.args([]any{from, to})
	// The events and the retention floor come from one snapshot: pruning
	// raises the floor in the transaction that removes rows, so a read that
	// may have missed rows always sees the floor above where it started, on
	// this replica or any other.
	tx, done, err := s.readTx(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, err
	}
	sl := s.newSlab()
	evs, full, err := scanEvents(rows, &sl, s.opts.LogReadBytes)
	if err != nil {
		return nil, 0, err
	}
	var floor int64
	if err := tx.QueryRowContext(ctx, s.sql.Meta.LogFloor).Scan(&floor); err != nil {
		return nil, 0, err
	}
	if from < floor {
		return nil, 0, &BelowFloorError{Floor: max(floor, s.compact.Load())}
	}
	through := to
	if !full {
		through = evs[len(evs)-1].Rev()
	}
	return evs, through, nil
}

// NextReadStep is how many revisions to ask Events for after a read that
// asked for [from, to] with step and got up to through: twice what it got
// when it stopped short of to (LogReadBytes), else step doubled, up to
// max. PostgreSQL sends every row a query asks for, and a read discards
// those past its bound, so asking for a whole step again after a short
// read transfers the rest of it each time.
func NextReadStep(step, from, to, through, max int64) int64 {
	if through < to {
		return 2 * (through - from + 1)
	}
	return min(2*step, max)
}

// slab keeps the values a read returns. What database/sql hands over for
// a column (sql.RawBytes, a Scanner's argument) is the driver's memory,
// valid only until the next row, so a value is copied before it is kept:
// into shared chunks, one allocation per chunk rather than one per value,
// and no second copy by database/sql. A dialect whose driver gives every
// row's values slices of their own (OwnedBlobs) has them kept as they
// are: the driver has allocated each value once already, and a copy would
// make reading a value cost twice its size.
type slab struct {
	buf []byte
	own bool // the driver's slices are the reader's (OwnedBlobs)
}

const (
	slabMinChunk = 4 << 10
	slabMaxChunk = 1 << 20
)

// newSlab is a slab for one read from s's database.
func (s *Store) newSlab() slab {
	_, own := s.d.(OwnedBlobs)
	return slab{own: own}
}

// keep returns b's bytes to keep, never nil: a value read back is empty,
// not absent. Capped, so that an append to one value cannot write over
// the next.
func (s *slab) keep(b blob) []byte {
	n := len(b.b)
	if n == 0 {
		return []byte{}
	}
	if s.own || b.mine {
		return b.b[:n:n]
	}
	if n > cap(s.buf)-len(s.buf) {
		// Chunks double, so a small answer does not hold a big one.
		s.buf = make([]byte, 0, max(n, min(2*cap(s.buf), slabMaxChunk), slabMinChunk))
	}
	at := len(s.buf)
	s.buf = append(s.buf, b.b...)
	return s.buf[at:len(s.buf):len(s.buf)]
}

// blob is a scan destination for a BLOB (bytea) column: what the driver
// returned, not copied. Unlike sql.RawBytes it knows a string the driver
// returned (a value stored as TEXT), which it converts to bytes of its
// own, where database/sql would copy it into a buffer it reuses.
type blob struct {
	b    []byte
	mine bool // converted here: not the driver's memory
}

func (v *blob) Scan(src any) error {
	switch x := src.(type) {
	case nil:
		*v = blob{}
	case []byte:
		*v = blob{b: x}
	case string:
		*v = blob{b: []byte(x), mine: true}
	default:
		return fmt.Errorf("mvcc: a key or value read as %T", src)
	}
	return nil
}

// kept is a scan destination that keeps a BLOB column's value in sl as it
// is scanned (nil for NULL), for sql.Row, which may release the driver's
// memory before its Scan returns.
type kept struct {
	sl  *slab
	dst *[]byte
}

func (k kept) Scan(src any) error {
	var b blob
	if err := b.Scan(src); err != nil || src == nil {
		return err
	}
	*k.dst = k.sl.keep(b)
	return nil
}

// logEvent is the change of a log row read into kv, but for its value.
func logEvent(kv *mvccpb.KeyValue, deleted, unixMs int64, value blob, sl *slab) *Event {
	if deleted != 0 {
		// A delete's kv has its key and revision only.
		kv.CreateRevision, kv.Version, kv.Lease = 0, 0, 0
		return &Event{Type: mvccpb.DELETE, Kv: kv, UnixMs: unixMs}
	}
	kv.Value = sl.keep(value)
	return &Event{Type: mvccpb.PUT, Kv: kv, UnixMs: unixMs}
}

// scanEvents reads logEventsSQL's rows into sl: all of them (full), or,
// with maxBytes > 0, those of the revisions before the first that begins
// once the events read take maxBytes or more (Event.Size).
func scanEvents(rows *sql.Rows, sl *slab, maxBytes int) (evs []*Event, full bool, err error) {
	defer rows.Close()
	var key, value, pValue blob
	size := 0
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		var sub, deleted, unixMs int64
		var pRev, pCreate, pVersion, pLease, pDeleted sql.NullInt64
		if err := rows.Scan(&kv.ModRevision, &sub, &key, &value, &kv.CreateRevision, &kv.Version, &kv.Lease, &deleted, &unixMs,
			&pRev, &pValue, &pCreate, &pVersion, &pLease, &pDeleted); err != nil {
			return nil, false, err
		}
		if maxBytes > 0 && size >= maxBytes && kv.ModRevision != evs[len(evs)-1].Rev() {
			return evs, false, nil
		}
		kv.Key = sl.keep(key)
		e := logEvent(kv, deleted, unixMs, value, sl)
		if pRev.Valid && pDeleted.Int64 == 0 {
			e.PrevKv = &mvccpb.KeyValue{Key: kv.Key, Value: sl.keep(pValue), CreateRevision: pCreate.Int64, ModRevision: pRev.Int64, Version: pVersion.Int64, Lease: pLease.Int64}
		}
		evs = append(evs, e)
		size += e.Size()
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return evs, true, nil
}
