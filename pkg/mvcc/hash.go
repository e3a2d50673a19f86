package mvcc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
)

// The state hash (ADR-046): one definition for every dialect, so that two
// copies of a store (replicas' database, a backup, an import, a migrated
// store) can be compared by a line of hex.
//
// The hash is SHA-256 over this byte stream, integers big-endian, int64s
// as their two's complement:
//
//	"quantykube state hash v1\x00"
//	R                                   8 bytes: the revision hashed
//	for each key live at R, in ascending byte order of the keys:
//	    len(key) 4 bytes, key, len(value) 4 bytes, value,
//	    create_revision, mod_revision, version, lease   8 bytes each
//	number of those keys                8 bytes
//
// and, when the history from F is asked for (HashQuery.History), then:
//
//	F                                   8 bytes
//	for each revision r with F < r <= R that the log holds, ascending:
//	    r                               8 bytes
//	    number of the revision's changes 8 bytes
//	    the sum modulo 2^256 of SHA-256(change) over its changes, 32 bytes,
//	    where change is
//	        len(key) 4 bytes, key, deleted 1 byte (1: a delete, 0: a put),
//	        and for a put: len(value) 4 bytes, value,
//	        create_revision, version, lease   8 bytes each
//	number of those revisions           8 bytes
//
// A revision's changes are summed, not ordered, so that the order of a
// revision's rows in the log (their sub, which an import chooses) is no
// part of it; one revision changes a key at most once, so nothing is lost.
// Commit times are no part of it: an import from etcd cannot know them.
//
// The live keys are read a page at a time in one read transaction, whose
// snapshot holds whatever commits meanwhile: memory holds a page, not the
// store (hashKeys). The history is read in windows of revisions, each a
// statement of its own (WatchSQL.Events): the rows of revisions up to R
// do not change, and SQLite's WAL is not held for the whole pass. The floors are read again
// at the end: a hash that retention or a Compact overtook is refused.

// HashQuery asks for the hash of the state at a revision.
type HashQuery struct {
	// Rev is the revision (0: the latest).
	Rev int64
	// History adds the log's changes with HistoryFrom < revision <= Rev;
	// HistoryFrom may not be below the floor of either the etcd API or the
	// log (retention's, Meta.LogFloor), under which copies may differ.
	History     bool
	HistoryFrom int64
}

// HashResult is a state hash and what it covers.
type HashResult struct {
	Sum [sha256.Size]byte
	// Rev is the revision hashed; Floor the etcd API's floor when the
	// hash began; Keys the live keys at Rev; Revisions and Changes the
	// history hashed (with HashQuery.History); Bytes the live keys' and
	// values' bytes.
	Rev, Floor                      int64
	Keys, Bytes, Revisions, Changes int64
	History                         bool
	HistoryFrom                     int64
}

// Hex is the hash in hexadecimal, as `quantykube check hash` prints it.
func (h *HashResult) Hex() string { return hex.EncodeToString(h.Sum[:]) }

// Uint32 is the hash folded to etcd's HashKV width: its first four bytes,
// big-endian.
func (h *HashResult) Uint32() uint32 { return binary.BigEndian.Uint32(h.Sum[:4]) }

const hashMagic = "quantykube state hash v1\x00"

// hashPageRows and hashPageBytes bound one page of live keys at the
// latest revision (ten times the rows at a past one): a page of large
// values asks for fewer keys next time.
var hashPageRows = 1000

const (
	hashPageBytes = 8 << 20
	// hashWindowRevs bounds the revisions of one history statement: on
	// SQLite a long read would keep the WAL from starting over.
	hashWindowRevs = 10000
)

// floors reads the latest revision, the etcd API's floor and the log's.
type floorReader func(ctx context.Context) (rev, floor, logFloor int64, err error)

// hashState computes q's hash on the pool db with the statements st;
// floors reads the revision and floors the checks use. With snapshot, a
// hash of the latest revision (q.Rev 0) is of the revision the keys' read
// transaction finds, which may be newer than floors' and costs no read
// of a past revision; a server's answers may not report a revision it has
// not published (ADR-037), a reader's may.
func hashState(ctx context.Context, db *sql.DB, st *Statements, q HashQuery, floors floorReader, snapshot bool) (*HashResult, error) {
	rev, floor, logFloor, err := floors(ctx)
	if err != nil {
		return nil, fmt.Errorf("hash: read the revision and floors: %w", err)
	}
	at := q.Rev
	switch {
	case at < 0:
		return nil, fmt.Errorf("hash: revision %d is negative", at)
	case at == 0:
		at = rev
	case at > rev:
		return nil, fmt.Errorf("hash at %d (the store is at %d): %w", at, rev, ErrFutureRev)
	case at < floor:
		return nil, fmt.Errorf("hash at %d (the floor is %d): %w", at, floor, ErrCompacted)
	}
	if q.History {
		if q.HistoryFrom > at {
			return nil, fmt.Errorf("hash: the history from %d begins after the revision hashed, %d", q.HistoryFrom, at)
		}
		if low := max(floor, logFloor); q.HistoryFrom < low {
			return nil, fmt.Errorf("hash: the history from %d reaches below the floor %d, under which what is kept may differ: %w", q.HistoryFrom, low, ErrCompacted)
		}
	}
	res := &HashResult{Rev: at, Floor: floor, History: q.History, HistoryFrom: q.HistoryFrom}
	h := sha256.New()
	h.Write([]byte(hashMagic))
	if err := hashKeys(ctx, db, st, at, snapshot && q.Rev == 0, h, res); err != nil {
		return nil, fmt.Errorf("hash: the keys at %d: %w", at, err)
	}
	at = res.Rev
	writeInt(h, res.Keys)
	if q.History {
		writeInt(h, q.HistoryFrom)
		if err := hashHistory(ctx, db, st, q.HistoryFrom, at, h, res); err != nil {
			return nil, fmt.Errorf("hash: the history from %d to %d: %w", q.HistoryFrom, at, err)
		}
		writeInt(h, res.Revisions)
	}
	// What was read holds only if nothing below it was pruned meanwhile.
	_, floor2, logFloor2, err := floors(ctx)
	if err != nil {
		return nil, fmt.Errorf("hash: read the floors again: %w", err)
	}
	if floor2 > at || (q.History && max(floor2, logFloor2) > q.HistoryFrom) {
		return nil, fmt.Errorf("hash at %d: the floor rose to %d while the hash was read: %w", at, max(floor2, logFloor2), ErrCompacted)
	}
	h.Sum(res.Sum[:0])
	return res, nil
}

// hashKeys writes rev and every key live at it into h (with latest, the
// transaction's own revision instead of rev), a page at a time, in
// one read transaction: when rev is that snapshot's own revision the
// pages read the live rows (ListSQL.LatestLimit), a seek each; else they
// read the state at rev (ListSQL.AtLimit), whose union of live rows and
// changed keys is sorted again for each page: on PostgreSQL and MySQL
// that costs a read of the rest of the range per page.
func hashKeys(ctx context.Context, db *sql.DB, st *Statements, rev int64, latest bool, h hash.Hash, res *HashResult) error {
	tx, err := db.BeginTx(ctx, readTxOptions)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var head, floor int64
	if err := tx.QueryRowContext(ctx, st.Meta.RevFloor).Scan(&head, &floor); err != nil {
		return err
	}
	if latest {
		rev = head
	}
	if rev > head {
		// Only a database that went back (a failover, ADR-027).
		return fmt.Errorf("the database is at %d, behind the revision hashed: %w", head, ErrFutureRev)
	}
	res.Rev = rev
	writeInt(h, rev)
	// A past revision's pages are ten times larger (within the bytes'
	// bound): each costs a read of the rest of the range.
	list, pageRows := &st.Range.List.AtLimit, int64(10*hashPageRows)
	if rev == head {
		list, pageRows = &st.Range.List.LatestLimit, int64(hashPageRows)
	}
	kr := KeyRange{Key: []byte{0}, Unbounded: true}
	var last []byte
	limit := pageRows
	for {
		args := append(rangeArgs(kr, rev, rev < head), limit)
		rows, err := tx.QueryContext(ctx, list.of(kr), args...)
		if err != nil {
			return err
		}
		n, size := int64(0), 0
		var key, value sql.RawBytes
		var create, mod, version, lease int64
		for rows.Next() {
			if err := rows.Scan(&key, &value, &create, &mod, &version, &lease); err != nil {
				rows.Close()
				return err
			}
			// The definition orders keys by their bytes: a database that
			// ordered them otherwise would hash another stream.
			if last != nil && bytes.Compare(key, last) <= 0 {
				rows.Close()
				return fmt.Errorf("the database returned key %q after %q: not in byte order", key, last)
			}
			last = append(last[:0], key...)
			writeBytes(h, key)
			writeBytes(h, value)
			writeInt(h, create)
			writeInt(h, mod)
			writeInt(h, version)
			writeInt(h, lease)
			n++
			size += len(key) + len(value)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		res.Keys += n
		res.Bytes += int64(size)
		if n < limit {
			return nil
		}
		kr = KeyRange{Key: append(bytes.Clone(last), 0), Unbounded: true}
		limit = max(1, min(pageRows, int64(hashPageBytes)/max(1, int64(size)/n)))
	}
}

// hashHistory writes the log's changes with from < revision <= to into h,
// a window of revisions at a time.
func hashHistory(ctx context.Context, db *sql.DB, st *Statements, from, to int64, h hash.Hash, res *HashResult) error {
	all := KeyRange{Key: []byte{0}, Unbounded: true}
	var cur int64
	var sum [sha256.Size]byte
	var n int64
	flush := func() {
		if n == 0 {
			return
		}
		writeInt(h, cur)
		writeInt(h, n)
		h.Write(sum[:])
		res.Revisions++
		res.Changes += n
		n, sum = 0, [sha256.Size]byte{}
	}
	row := sha256.New()
	var digest [sha256.Size]byte
	for lo := from + 1; lo <= to; lo += hashWindowRevs {
		hi := min(to, lo+hashWindowRevs-1)
		rows, err := db.QueryContext(ctx, st.Watch.Events.of(all), all.args([]any{lo, hi})...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var rev, sub, create, version, lease, deleted, unixMs int64
			var key, value sql.RawBytes
			var prevRev, prevCreate, prevVersion, prevLease, prevDeleted sql.NullInt64
			var prevValue sql.RawBytes
			if err := rows.Scan(&rev, &sub, &key, &value, &create, &version, &lease, &deleted, &unixMs,
				&prevRev, &prevValue, &prevCreate, &prevVersion, &prevLease, &prevDeleted); err != nil {
				rows.Close()
				return err
			}
			if rev != cur {
				if rev < cur {
					rows.Close()
					return fmt.Errorf("the database returned revision %d after %d", rev, cur)
				}
				flush()
				cur = rev
			}
			row.Reset()
			writeBytes(row, key)
			if deleted != 0 {
				row.Write([]byte{1})
			} else {
				row.Write([]byte{0})
				writeBytes(row, value)
				writeInt(row, create)
				writeInt(row, version)
				writeInt(row, lease)
			}
			addSum(&sum, row.Sum(digest[:0]))
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	flush()
	return nil
}

// addSum adds d to sum, both 256-bit big-endian numbers, modulo 2^256.
func addSum(sum *[sha256.Size]byte, d []byte) {
	carry := uint16(0)
	for i := len(sum) - 1; i >= 0; i-- {
		v := uint16(sum[i]) + uint16(d[i]) + carry
		sum[i], carry = byte(v), v>>8
	}
}

func writeInt(h hash.Hash, v int64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	h.Write(b[:])
}

func writeBytes(h hash.Hash, p []byte) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(len(p)))
	h.Write(b[:])
	h.Write(p)
}

// Hash is the state hash of the store (see above) at q.Rev, read from
// its readers' pool: a revision above Rev is ErrFutureRev, one below
// Floor ErrCompacted.
func (s *Store) Hash(ctx context.Context, q HashQuery) (*HashResult, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return hashState(ctx, s.rdb, s.sql, q, func(ctx context.Context) (rev, floor, logFloor int64, err error) {
		// The published revision: what any read now sees.
		rev, floor = s.Rev(), s.Floor()
		err = s.rdb.QueryRowContext(ctx, s.sql.Meta.LogFloor).Scan(&logFloor)
		return rev, max(floor, s.compact.Load()), logFloor, err
	}, false)
}

// errNotStore is returned for a database without QuantyKube's tables.
var errNotStore = errors.New("no QuantyKube store (no meta table with a schema version)")
