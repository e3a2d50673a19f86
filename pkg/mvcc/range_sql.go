package mvcc

import (
	"context"
	"database/sql"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The SQL a Range runs when the live index cannot answer it (a past
// revision, PostgreSQL, a store over its index budget): the statements, by
// the shape of the request, and the fetch that reads their rows.

// pastSQL is the subquery of the rows of keys in kr that changed after
// revision at, as they were at it (absent if deleted then):
// only those need resolving from the log; every other key's current row is
// already its state at that revision. It scans the log from at onwards, which
// for the revisions the apiserver pins (seconds old) is a handful of rows.
func (s *Store) pastSQL(kr KeyRange, at int64, args []any) (string, []any) {
	cond, args2 := s.q.where("y.key", kr, nil)
	// CROSS JOIN keeps SQLite's join order: the few changed keys drive the
	// lookups, never a scan of the log.
	sub := `SELECT l.key AS key, l.value AS value, l.create_rev AS create_rev, l.rev AS mod_rev, l.version AS version, l.lease AS lease
		FROM (SELECT c.key AS k, (SELECT MAX(x.rev) FROM log x WHERE x.key = c.key AND x.rev <= ?) AS r
		      FROM (SELECT DISTINCT y.key FROM ` + s.d.LogByRev("y") + ` WHERE y.rev > ? AND ` + cond + `) c) t
		CROSS JOIN log l
		WHERE l.key = t.k AND l.rev = t.r AND l.deleted = 0`
	args = append(args, at, at)
	return sub, append(args, args2...)
}

func (s *Store) countSQL(kr KeyRange, past bool) string {
	cond, _ := s.q.where("key", kr, nil)
	if !past {
		return `SELECT COUNT(*) FROM current WHERE ` + cond
	}
	sub, _ := s.pastSQL(kr, 0, nil)
	return `SELECT (SELECT COUNT(*) FROM current WHERE ` + cond + ` AND mod_rev <= ?) + (SELECT COUNT(*) FROM (` + sub + `) p)`
}

func (s *Store) rangeArgs(kr KeyRange, at int64, past bool) []any {
	_, args := s.q.where("key", kr, nil)
	if past {
		args = append(args, at)
		_, args = s.pastSQL(kr, at, args)
	}
	return args
}

func (s *Store) count(ctx context.Context, q querier, kr KeyRange, at, rev int64) (int64, error) {
	past := at < rev
	var n int64
	err := q.QueryRowContext(ctx, s.countSQL(kr, past), s.rangeArgs(kr, at, past)...).Scan(&n)
	return n, err
}

func (s *Store) fetchSQL(kr KeyRange, past, limited, keysOnly bool) string {
	cond, _ := s.q.where("c.key", kr, nil)
	cols := liveCols
	if keysOnly {
		cols = liveKeyCols
	}
	live := `SELECT ` + cols + ` FROM current c WHERE ` + cond
	var b strings.Builder
	if !past {
		b.WriteString(live + " ORDER BY c.key")
	} else {
		pcols := "key, value, create_rev, mod_rev, version, lease"
		if keysOnly {
			pcols = "key, NULL, create_rev, mod_rev, version, lease"
		}
		sub, _ := s.pastSQL(kr, 0, nil)
		b.WriteString(live + " AND c.mod_rev <= ? UNION ALL SELECT " + pcols + " FROM (" + sub + ") p ORDER BY 1")
	}
	if limited {
		b.WriteString(" LIMIT ?")
	}
	return b.String()
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
	args := s.rangeArgs(kr, at, past)
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
