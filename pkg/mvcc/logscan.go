package mvcc

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// logScanRows bounds the log rows one page of a filtered, descending or
// end-bounded Log reads (LogQuery.Keep), and those a page of a wide range
// walks in the log's order, in its range or not (window): a page whose
// filter or range keeps few of them ends there, with fewer entries than
// its limit (none, maybe) and a continue token, and the client pages on. It is History's largest page
// (history.MaxLogLimit), so a filtered page costs at most what an
// unfiltered page of the largest size already may: on SQLite about 30 ms
// of row headers on two shared cores (BenchmarkLogScan), whatever the
// filter keeps.
var logScanRows = 10000

// scanRow is one row a scan kept: where it is, its key, its id, and the
// sizes its entry will take.
type scanRow struct {
	id   int64
	c    LogCursor
	key  []byte
	n    int   // its value's bytes (0: a delete)
	prev int64 // its prev_kv's row id (0: none, or a delete)
	pn   int   // its prev_kv's value bytes (-1: no prev_kv)
}

// scanLog is Log over the revision-ordered log in either direction,
// between the floors, keeping the rows q.Keep keeps. Its first statement
// reads row headers only (id, revision, key, the value's size, never the
// value), so a row Keep leaves out costs no value read; a second reads the
// kept rows' prev_kv headers, and a third the page's values by id. It
// reads at most logScanRows rows.
func (s *Store) scanLog(ctx context.Context, q LogQuery, page *LogPage, toRev int64) (*LogPage, error) {
	narrow := false
	if !q.Range.Single() {
		var err error
		if narrow, err = s.isNarrow(ctx, q.Range); err != nil {
			return nil, fmt.Errorf("log: count the range's changes: %w", err)
		}
	}
	// The page lists the rows strictly between lo and hi.
	lo, hi := LogCursor{Rev: q.FromRev, Sub: -1}, LogCursor{Rev: toRev, Sub: math.MaxInt64}
	if q.After != (LogCursor{}) {
		if q.Descending && q.After.before(hi) {
			hi = q.After
		} else if !q.Descending && lo.before(q.After) {
			lo = q.After
		}
	}
	// A wide range is read in the log's order: the page reads at most
	// logScanRows rows of the log, in its range or not (window).
	var edge LogCursor // the window's last row, where it narrowed the page
	if !q.Range.Single() && !narrow {
		from := lo
		if q.Descending {
			from = hi
		}
		w, ok, err := s.window(ctx, from, q.Descending)
		if err != nil {
			return nil, fmt.Errorf("log: find the page's window: %w", err)
		}
		switch {
		case ok && q.Descending && lo.before(LogCursor{Rev: w.Rev, Sub: w.Sub - 1}):
			lo, edge = LogCursor{Rev: w.Rev, Sub: w.Sub - 1}, w
		case ok && !q.Descending && (LogCursor{Rev: w.Rev, Sub: w.Sub + 1}).before(hi):
			hi, edge = LogCursor{Rev: w.Rev, Sub: w.Sub + 1}, w
		}
	}
	keep := q.Keep
	if keep == nil {
		keep = func([]byte, int64) Verdict { return Take }
	}
	rows, last, end, err := s.scanHeads(ctx, q, narrow, lo, hi, keep)
	if err != nil {
		return nil, fmt.Errorf("log: scan the row headers: %w", err)
	}
	sp := logSpan{limit: q.Limit, maxBytes: q.MaxBytes}
	if sp.maxBytes <= 0 {
		sp.maxBytes = math.MaxInt
	}
	if len(rows) > 0 {
		if err := s.prevHeads(ctx, rows[:min(len(rows), q.Limit)]); err != nil {
			return nil, fmt.Errorf("log: read the prev_kvs' headers: %w", err)
		}
	}
	var taken []scanRow
	for _, r := range rows {
		if !sp.add(r.c, eventSize(len(r.key), r.n, r.pn)) {
			break
		}
		taken = append(taken, r)
	}
	switch {
	case sp.more:
		page.More, page.Next = true, sp.last
	case !end:
		// The scan stopped at its bound: the next page goes on after the
		// last row it read, kept or not.
		page.More, page.Next = true, last
	case edge != (LogCursor{}):
		// The scan read its window to the end: the next page goes on
		// after it.
		page.More, page.Next = true, edge
	}
	if page.Events, err = s.readEntries(ctx, taken); err != nil {
		return nil, fmt.Errorf("log: read the page's values: %w", err)
	}
	return page, nil
}

// scanHeads reads row headers between lo and hi in q's order, keeping
// those keep takes, until it has kept q.Limit+1 of them, read logScanRows
// rows, reached the end (end set), or keep stops it. last is the last row
// read and passed on (the page goes on after it).
//
// On a database that makes rows as they are read (SQLite) one statement
// asks for every row the scan may read; elsewhere (PostgreSQL sends every
// row a LIMIT allows) the first asks for a page's worth and each next one
// for twice as many.
func (s *Store) scanHeads(ctx context.Context, q LogQuery, narrow bool, lo, hi LogCursor, keep func([]byte, int64) Verdict) (kept []scanRow, last LogCursor, end bool, err error) {
	step := q.Limit + 1
	if _, ok := s.d.(LazyRows); ok {
		step = logScanRows
	}
	sl := s.newSlab()
	scanned := 0
	for scanned < logScanRows {
		n := min(step, logScanRows-scanned)
		sqlText, args := s.scanSQL(q, narrow, lo, hi, n)
		got, full, err := func() (int, bool, error) {
			rows, err := s.readRows(ctx, sqlText, args...)
			if err != nil {
				return 0, false, err
			}
			defer rows.Close() // once the page is full: no more rows are made
			got := 0
			var key blob
			for rows.Next() {
				var r scanRow
				if err := rows.Scan(&r.id, &r.c.Rev, &r.c.Sub, &key, &r.n); err != nil {
					return got, false, err
				}
				got++
				// A single key's rows are bounded by revision in SQL, and
				// the cursor may sit inside the revision.
				if !lo.before(r.c) || !r.c.before(hi) {
					continue
				}
				switch keep(key.b, r.c.Rev) {
				case Stop:
					if scanned == 0 {
						return got, false, fmt.Errorf("the filter stopped the page at its first row, %d.%d: the page would repeat itself", r.c.Rev, r.c.Sub)
					}
					return got, true, nil
				case Skip:
					scanned++
					last = r.c
					continue
				}
				scanned++
				last = r.c
				// Below its own rule's floor, a kept key's changes are not
				// all retained (logFloor).
				if rule := s.ruleFor(key.b); q.FromRev > 0 && r.c.Rev < rule.floor().Rev {
					f := rule.floor()
					return got, false, &OutOfRangeError{Msg: fmt.Sprintf("revision %d is older than the oldest retained revision %d (%s) of the keys under %q, which the listing holds: start at or after it, or leave those keys out",
						q.FromRev, f.Rev, fmtMs(f.UnixMs), rule.prefix)}
				}
				r.key = sl.keep(key)
				kept = append(kept, r)
				if len(kept) > q.Limit {
					return got, true, nil
				}
			}
			return got, false, rows.Err()
		}()
		if err != nil || full {
			return kept, last, false, err
		}
		if got < n {
			return kept, last, true, nil
		}
		if q.Descending {
			hi = last
		} else {
			lo = last
		}
		step *= 2
	}
	return kept, last, false, nil
}

// scanSQL is the statement that reads at most n row headers between lo
// and hi in q's order, and its arguments: through the (rev, sub) index
// for a wide range, through (key, rev) for one key or a narrow range (the
// page's few rows sorted, no value among them).
func (s *Store) scanSQL(q LogQuery, narrow bool, lo, hi LogCursor, n int) (string, []any) {
	kr, st := q.Range, &s.sql.LogPage
	if kr.Single() {
		// One key changes once per revision: its rows are in (key, rev)
		// order already.
		text := st.KeyHeads
		if q.Descending {
			text = st.KeyHeadsDesc
		}
		return text, []any{kr.Key, lo.Rev, hi.Rev, n}
	}
	var heads *Spans
	switch {
	case narrow && q.Descending:
		heads = &st.HeadsByKeyDesc
	case narrow:
		heads = &st.HeadsByKey
	case q.Descending:
		heads = &st.HeadsDesc
	default:
		heads = &st.Heads
	}
	return heads.of(kr), append(kr.args([]any{lo.Rev, lo.Sub, hi.Rev, hi.Sub}), n)
}

// prevHeads fills in rows' sizes and their prev_kvs' row ids and sizes:
// the key's row before each, unless a delete.
func (s *Store) prevHeads(ctx context.Context, rows []scanRow) error {
	at := make(map[int64]int, len(rows))
	ids := make([]int64, len(rows))
	for i, r := range rows {
		at[r.id] = i
		ids[i] = r.id
	}
	return s.byIDs(ctx, &s.sql.LogPage.PrevHeads, ids, func(rs *sql.Rows) error {
		var id, deleted int64
		var pID, pLen, pDeleted sql.NullInt64
		if err := rs.Scan(&id, &deleted, &pID, &pLen, &pDeleted); err != nil {
			return err
		}
		r := &rows[at[id]]
		if deleted != 0 {
			r.n = 0
		}
		r.pn = -1
		if pID.Valid && pDeleted.Int64 == 0 {
			r.prev, r.pn = pID.Int64, int(pLen.Int64)
		}
		return nil
	})
}

// readEntries reads the page's rows and their prev_kvs by id, values and
// all. A row retention removed since the scan is left out, and so is a
// prev_kv it removed.
func (s *Store) readEntries(ctx context.Context, rows []scanRow) ([]*Event, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, 2*len(rows))
	for _, r := range rows {
		ids = append(ids, r.id)
		if r.prev != 0 {
			ids = append(ids, r.prev)
		}
	}
	type full struct {
		rev, create, version, lease, deleted, unixMs int64
		value                                        []byte
	}
	got := make(map[int64]*full, len(ids))
	sl := s.newSlab()
	err := s.byIDs(ctx, &s.sql.LogPage.Entries, ids, func(rs *sql.Rows) error {
		var id int64
		var f full
		var value blob
		if err := rs.Scan(&id, &f.rev, &value, &f.create, &f.version, &f.lease, &f.deleted, &f.unixMs); err != nil {
			return err
		}
		if f.deleted == 0 {
			f.value = sl.keep(value)
		}
		got[id] = &f
		return nil
	})
	if err != nil {
		return nil, err
	}
	evs := make([]*Event, 0, len(rows))
	for _, r := range rows {
		f := got[r.id]
		if f == nil {
			continue // retention removed it
		}
		e := &Event{Type: mvccpb.PUT, UnixMs: f.unixMs, Kv: &mvccpb.KeyValue{Key: r.key, Value: f.value, ModRevision: f.rev, CreateRevision: f.create, Version: f.version, Lease: f.lease}}
		if f.deleted != 0 {
			e.Type = mvccpb.DELETE
			e.Kv = &mvccpb.KeyValue{Key: r.key, ModRevision: f.rev}
		}
		if p := got[r.prev]; r.prev != 0 && p != nil && p.deleted == 0 {
			e.PrevKv = &mvccpb.KeyValue{Key: r.key, Value: p.value, ModRevision: p.rev, CreateRevision: p.create, Version: p.version, Lease: p.lease}
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// byIDs runs one of qs, with the list of ids padded to its length
// (IDListSizes; several statements for more), and calls f for each row. A
// padded list repeats its first id: IN matches a row once.
func (s *Store) byIDs(ctx context.Context, qs *IDLists, ids []int64, f func(*sql.Rows) error) error {
	for len(ids) > 0 {
		i := len(IDListSizes) - 1
		for j, n := range IDListSizes {
			if n >= len(ids) {
				i = j
				break
			}
		}
		size := IDListSizes[i]
		part := ids[:min(len(ids), size)]
		ids = ids[len(part):]
		args := make([]any, size)
		for i := range args {
			args[i] = part[0]
			if i < len(part) {
				args[i] = part[i]
			}
		}
		err := func() error {
			rows, err := s.readRows(ctx, qs[i], args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				if err := f(rows); err != nil {
					return err
				}
			}
			return rows.Err()
		}()
		if err != nil {
			return err
		}
	}
	return nil
}
