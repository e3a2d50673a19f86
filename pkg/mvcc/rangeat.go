package mvcc

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// RangeAtQuery asks for one page of the keys of a range as they were at
// a revision (History's Get with a range_end).
type RangeAtQuery struct {
	Range KeyRange
	Rev   int64
	// After is the last key of the previous page, or the last its scan
	// read (nil: from Range.Key).
	After []byte
	// Limit (at least 1) and MaxBytes end a page as they end a Log page
	// (LogQuery); a page holds at least one key, if any is found.
	Limit, MaxBytes int
}

// RangeAtPage is one page of a range at a revision.
type RangeAtPage struct {
	Kvs []*mvccpb.KeyValue
	// More is set when keys may follow; Next is then where the page
	// stopped: its last key, or the last key its scan read.
	More bool
	Next []byte
}

// rangeAtScanKeys bounds the keys one page of RangeAt looks at: a key
// deleted before the revision (or created after it) is looked at and left
// out, and a page ends with a continue token once it has looked at this
// many, found or not. Each key costs two index lookups.
var rangeAtScanKeys = 10000

// RangeAt lists the keys of q.Range that existed at q.Rev, in key order,
// each as it was then, a page at a time. It walks the range's keys through
// the log's (key, rev) index, one lookup to the next key and one to its row
// at the revision, and reads the values of the page's keys alone.
func (s *Store) RangeAt(ctx context.Context, q RangeAtQuery) (*RangeAtPage, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("range at a revision: a page's limit must be at least one key, not %d", q.Limit)
	}
	if cur := s.Rev(); q.Rev > cur {
		return nil, &OutOfRangeError{Msg: fmt.Sprintf("revision %d is a future revision: the current revision is %d", q.Rev, cur)}
	}
	if f := s.rangeFloor(q.Range); q.Rev < f.Rev {
		return nil, &OutOfRangeError{Msg: fmt.Sprintf("revision %d is older than the oldest retained revision %d (%s)", q.Rev, f.Rev, fmtMs(f.UnixMs))}
	}
	page := &RangeAtPage{}
	if q.Range.Empty() {
		return page, nil
	}
	from := q.Range.Key
	if q.After != nil {
		// A page never reads outside its range, whatever After says.
		if !q.Range.Contains(q.After) {
			return nil, fmt.Errorf("range at a revision: the page would start after %q, outside the range", q.After)
		}
		from = append(append([]byte(nil), q.After...), 0) // the first key after it
	}
	step := q.Limit + 1
	if _, ok := s.d.(LazyRows); ok {
		step = rangeAtScanKeys
	}
	maxBytes := q.MaxBytes
	if maxBytes <= 0 {
		maxBytes = math.MaxInt
	}
	type head struct {
		key []byte
		id  int64
		n   int // the value's bytes
	}
	var found []head
	var last []byte
	scanned, end := 0, false
	sl := s.newSlab()
	for scanned < rangeAtScanKeys && len(found) <= q.Limit && !end {
		n := min(step, rangeAtScanKeys-scanned)
		sqlText, args := s.keysAtSQL(q.Range, from, q.Rev, n)
		got := 0
		err := func() error {
			rows, err := s.readRows(ctx, sqlText, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			var key blob
			for rows.Next() && len(found) <= q.Limit {
				var id, size, deleted sql.NullInt64
				if err := rows.Scan(&key, &id, &size, &deleted); err != nil {
					return err
				}
				got++
				scanned++
				last = sl.keep(key)
				if id.Valid && deleted.Int64 == 0 {
					found = append(found, head{key: last, id: id.Int64, n: int(size.Int64)})
				}
			}
			return rows.Err()
		}()
		if err != nil {
			return nil, fmt.Errorf("range at a revision: scan the keys: %w", err)
		}
		end = got < n && len(found) <= q.Limit
		from = append(append([]byte(nil), last...), 0)
		step *= 2
	}
	// The page: up to Limit keys and MaxBytes, one key at least.
	total, take := 0, 0
	for _, h := range found {
		size := 64 + len(h.key) + h.n
		if take == q.Limit || (take > 0 && size > maxBytes-total) {
			break
		}
		total += size
		take++
	}
	switch {
	case take < len(found):
		page.More, page.Next = true, found[take-1].key
	case !end:
		page.More, page.Next = true, last
	}
	if take == 0 {
		return page, nil
	}
	ids := make([]int64, take)
	at := make(map[int64]*mvccpb.KeyValue, take)
	page.Kvs = make([]*mvccpb.KeyValue, 0, take)
	for i, h := range found[:take] {
		ids[i] = h.id
		kv := &mvccpb.KeyValue{Key: h.key}
		at[h.id] = kv
		page.Kvs = append(page.Kvs, kv)
	}
	vsl := s.newSlab()
	err := s.byIDs(ctx, &s.sql.RangeAt.Values, ids, func(rs *sql.Rows) error {
		var id int64
		var value blob
		var kv mvccpb.KeyValue
		if err := rs.Scan(&id, &kv.ModRevision, &value, &kv.CreateRevision, &kv.Version, &kv.Lease); err != nil {
			return err
		}
		if dst := at[id]; dst != nil {
			dst.ModRevision, dst.CreateRevision, dst.Version, dst.Lease = kv.ModRevision, kv.CreateRevision, kv.Version, kv.Lease
			dst.Value = vsl.keep(value)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("range at a revision: read the page's values: %w", err)
	}
	// A row retention removed since the scan (a superseded one cannot be
	// the state at a retained revision, so only below a raised floor) is
	// left out.
	out := page.Kvs[:0]
	for _, kv := range page.Kvs {
		if kv.ModRevision != 0 {
			out = append(out, kv)
		}
	}
	page.Kvs = out
	return page, nil
}

// keysAtSQL is the statement that reads the next n keys of kr from from
// on, in key order, each with its row at revision at (its id, its value's
// size and whether it is a delete; none when the key had no row then),
// and its arguments. A recursive query walks the (key, rev) index from
// one key to the next, so a key's many revisions cost one lookup, not a
// scan of them.
func (s *Store) keysAtSQL(kr KeyRange, from []byte, at int64, n int) (string, []any) {
	if kr.Unbounded {
		return s.sql.RangeAt.Keys.From, []any{from, n, at}
	}
	end := kr.End
	if kr.Single() {
		end = append(append([]byte(nil), kr.Key...), 0)
	}
	return s.sql.RangeAt.Keys.Between, []any{from, end, end, n, at}
}
