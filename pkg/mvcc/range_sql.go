package mvcc

import (
	"context"
	"database/sql"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// What a Range reads from SQL when the live index cannot answer it (a
// past revision, PostgreSQL, a store over its index budget): which of the
// dialect's statements (RangeSQL) its shape runs, and the fetch that reads
// their rows.

// rangeArgs are the arguments of a Range statement over kr at revision
// at (past: below the store's revision): the key range, then for a past
// revision at three times (the current rows not changed since at, and the
// changed keys' rows as of at) and the key range again.
func rangeArgs(kr KeyRange, at int64, past bool) []any {
	args := kr.args(nil)
	if past {
		args = kr.args(append(args, at, at, at))
	}
	return args
}

func (s *Store) countSQL(kr KeyRange, past bool) string {
	if past {
		return s.sql.Range.CountAt.of(kr)
	}
	return s.sql.Range.Count.of(kr)
}

func (s *Store) count(ctx context.Context, q querier, kr KeyRange, at, rev int64) (int64, error) {
	past := at < rev
	var n int64
	err := q.QueryRowContext(ctx, s.countSQL(kr, past), rangeArgs(kr, at, past)...).Scan(&n)
	return n, err
}

func (s *Store) fetchSQL(kr KeyRange, past, limited, keysOnly bool) string {
	l := &s.sql.Range.List
	if keysOnly {
		l = &s.sql.Range.Keys
	}
	switch {
	case past && limited:
		return l.AtLimit.of(kr)
	case past:
		return l.At.of(kr)
	case limited:
		return l.LatestLimit.of(kr)
	}
	return l.Latest.of(kr)
}

// fetch reads the rows of kr at revision at. sizeHint (the count, when
// known) sizes the answer up front.
//
// A list answer is built from three allocations, not three per row: the
// KeyValues share one slice and every key and value is copied into one
// slab. database/sql would otherwise copy each []byte the driver already
// copied (bytes.Clone per column) and grow the slice as it goes, and a
// profile of a 500-key list showed both, with the garbage collection they
// cause, as a large share of its CPU
// (docs/benchmarks/first-figures-and-live-index.md).
func (s *Store) fetch(ctx context.Context, q querier, kr KeyRange, at, rev, limit int64, keysOnly bool, sizeHint int64) ([]*mvccpb.KeyValue, error) {
	past := at < rev
	args := rangeArgs(kr, at, past)
	if limit > 0 {
		args = append(args, limit)
		sizeHint = min(sizeHint, limit)
	}
	rows, err := q.QueryContext(ctx, s.fetchSQL(kr, past, limit > 0, keysOnly), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	n := int(min(max(sizeHint, 0), 4096))
	kvs := make([]*mvccpb.KeyValue, 0, n)
	store := make([]mvccpb.KeyValue, n)
	var slab []byte
	var key, value sql.RawBytes
	for rows.Next() {
		if len(store) == 0 {
			store = make([]mvccpb.KeyValue, max(16, len(kvs)/2))
		}
		kv := &store[0]
		store = store[1:]
		if err := rows.Scan(&key, &value, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease); err != nil {
			return nil, err
		}
		if need := len(key) + len(value); cap(slab)-len(slab) < need {
			// Sized for the rows still expected, so one slab usually holds
			// the whole answer; a slab is never moved once handed out.
			per := need
			if len(kvs) > 0 {
				per = max(per, len(slab)/len(kvs))
			}
			rest := max(n-len(kvs), 1)
			slab = make([]byte, 0, max(need, min(per*rest, 64<<20)))
		}
		kv.Key, slab = carve(slab, key)
		if value != nil {
			kv.Value, slab = carve(slab, value)
		}
		kvs = append(kvs, kv)
	}
	return kvs, rows.Err()
}

// carve copies b to the end of slab and returns the copy, capacity-capped so
// that an append to it can never overwrite its neighbour.
func carve(slab, b []byte) (out, rest []byte) {
	start := len(slab)
	slab = append(slab, b...)
	return slab[start:len(slab):len(slab)], slab
}

// scanCurrent reads the current rows in kr in key order, or with lease set
