package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// LogQuery asks for one page of the retained changes in a range.
type LogQuery struct {
	Range KeyRange
	// FromRev is the oldest revision wanted (0: everything retained), in
	// either order.
	FromRev int64
	// ToRev is the newest revision wanted, inclusive (0, or past the
	// store's revision: the store's revision).
	ToRev int64
	// Descending lists the newest first; After then moves downward.
	Descending bool
	// After is the last entry of the previous page (zero: from the start),
	// or the last row its scan read (logScanRows).
	After LogCursor
	// Keep, when set, is asked of each row's key and revision, in the
	// page's order, before anything else of the row is read: a row it
	// skips costs no value read and is left out; Stop ends the page before
	// the row, which the next page starts with (a filter that must ask
	// too many questions of an authorizer ends its page so). It must not
	// stop at the first row a page reads: that page would repeat itself,
	// and is an error. key is valid only during the call. It may block;
	// the page's first statement stays open meanwhile. With Keep, FromRev
	// is checked against the lowest floor of the rules the range touches,
	// and each kept row against its own key's rule: a window the filter's
	// keys are not retained for is an *OutOfRangeError naming their
	// prefix (logFloor).
	Keep func(key []byte, rev int64) Verdict
	// Limit (at least 1) and MaxBytes end a page at that many entries or
	// bytes (Event.Size: values and prev_kvs), whichever comes first; a
	// page holds at least one entry, and MaxBytes <= 0 sets no byte bound.
	Limit, MaxBytes int
}

// Verdict is what a Log's filter says of one row (LogQuery.Keep).
type Verdict int

const (
	// Skip leaves the row out of the page.
	Skip Verdict = iota
	// Take puts the row on the page.
	Take
	// Stop ends the page before the row.
	Stop
)

// LogCursor is a position in the log: a change, by revision and its index
// among the revision's changes.
type LogCursor struct {
	Rev, Sub int64
}

// before reports whether c comes before d in the log.
func (c LogCursor) before(d LogCursor) bool {
	return c.Rev < d.Rev || (c.Rev == d.Rev && c.Sub < d.Sub)
}

// LogPage is one page of a key range's retained changes.
type LogPage struct {
	Events []*Event
	// More is set when entries follow; Next is then the last one returned.
	More bool
	Next LogCursor
	// HeaderRev is the store's revision when the page was read.
	HeaderRev int64
}

// Log lists the retained changes in q.Range, oldest first (History), or
// as q asks: newest first, up to a revision, filtered by key (logscan.go).
//
// A page reads the values of its own entries and little more, so that
// what a request holds is its page, whatever limit it asks for: values
// are what takes memory, and any reader chooses the limit. Its first
// statement reads the changes from the cursor on with their sizes and
// prev_kvs' sizes, and stops where the page ends: at Limit entries, or
// before the first that would take the page past MaxBytes. It reads the
// values of up to inlineBytes with their rows; a second statement reads
// the page's larger ones, if any.
func (s *Store) Log(ctx context.Context, q LogQuery) (*LogPage, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("log: a page's limit must be at least one entry, not %d", q.Limit)
	}
	page := &LogPage{HeaderRev: s.Rev()}
	kr := q.Range
	if q.FromRev > page.HeaderRev {
		return nil, &OutOfRangeError{Msg: fmt.Sprintf("revision %d is a future revision: the current revision is %d", q.FromRev, page.HeaderRev)}
	}
	if q.FromRev > 0 {
		// The floor that matters is the highest of the rules the range touches.
		if floor := s.logFloor(kr, q.Keep != nil); q.FromRev < floor.Rev {
			return nil, &OutOfRangeError{Msg: fmt.Sprintf("revision %d is older than the oldest retained revision %d (%s)", q.FromRev, floor.Rev, fmtMs(floor.UnixMs))}
		}
	}
	toRev := page.HeaderRev
	if q.ToRev > 0 {
		toRev = min(toRev, q.ToRev)
	}
	if kr.Empty() || q.FromRev > toRev {
		return page, nil
	}
	if q.Keep != nil || q.Descending || toRev < page.HeaderRev {
		return s.scanLog(ctx, q, page, toRev)
	}
	// The page starts after the cursor and at FromRev at the earliest; the
	// first change of a revision has sub 0.
	after := q.After
	if after == (LogCursor{}) {
		after.Sub = -1
	}
	if from := (LogCursor{Rev: q.FromRev, Sub: -1}); after.before(from) {
		after = from
	}
	sp := logSpan{limit: q.Limit, maxBytes: q.MaxBytes}
	if sp.maxBytes <= 0 {
		sp.maxBytes = math.MaxInt
	}
	var evs []*Event
	var err error
	var cut LogCursor // where a wide range's page stopped looking
	if kr.Single() {
		evs, err = s.keyLog(ctx, kr.Key, after, &sp)
	} else {
		evs, cut, err = s.rangeLog(ctx, kr, after, &sp)
	}
	if err != nil {
		return nil, err
	}
	// Retention may remove rows between the two statements: the page then
	// leaves out what it took, and the next one still starts after its span.
	page.Events = withValues(evs)
	switch {
	case sp.more:
		page.More, page.Next = true, sp.last
	case cut != (LogCursor{}):
		page.More, page.Next = true, cut
	}
	// The page reports HeaderRev and shows nothing after it (kv.go): SQL
	// may already hold a batch that is not yet published, which a read
	// that starts after this page may not see. The changes are in
	// revision order, so what follows is after it too: the page is whole
	// up to HeaderRev.
	for i, e := range page.Events {
		if e.Rev() > page.HeaderRev {
			page.Events, page.More, page.Next = page.Events[:i], false, LogCursor{}
			break
		}
	}
	return page, nil
}

// window is the row logScanRows rows after from in (rev, sub) order
// (desc: before it, going down), read through the (rev, sub) index and
// nothing else: a page that reads the log in revision order reads no
// further, so that it walks a bounded number of rows whatever part of
// them its range holds (ADR-036). ok is false when the log ends sooner.
func (s *Store) window(ctx context.Context, from LogCursor, desc bool) (end LogCursor, ok bool, err error) {
	text := s.sql.LogPage.Window
	if desc {
		text = s.sql.LogPage.WindowDesc
	}
	err = s.readRow(ctx, text, from.Rev, from.Sub, logScanRows-1).Scan(&end.Rev, &end.Sub)
	if errors.Is(err, sql.ErrNoRows) {
		return LogCursor{}, false, nil
	}
	return end, err == nil, err
}

// logSpan is the part of the log a page covers: n changes, through last,
// of bytes in all; more is set once a change after last is left out.
type logSpan struct {
	limit, maxBytes int
	n, bytes        int
	last            LogCursor
	more            bool
}

// add takes the change at c, of size bytes, unless the span is full:
// limit changes, or size would take it past maxBytes. Its first change it
// takes whatever its size.
func (sp *logSpan) add(c LogCursor, size int) bool {
	if sp.n == sp.limit || (sp.n > 0 && size > sp.maxBytes-sp.bytes) {
		sp.more = true
		return false
	}
	sp.n++
	sp.bytes += size
	sp.last = c
	return true
}

// rows is how many rows a statement that reads the span and extra more
// rows asks for.
func (sp *logSpan) rows(extra int) int { return min(sp.limit, math.MaxInt32) + extra }

// inlineBytes is the largest value a Log page's first statement reads
// with its row. The statement reads one row past the page, and that row's
// value (and its prev_kv's, in a range) is read for nothing; the page's
// larger values take a second statement. PostgreSQL sends every row the
// statement's LIMIT allows, so there it reads sizes only and the second
// statement every value.
func (s *Store) inlineBytes() int {
	if _, ok := s.d.(LazyRows); ok {
		return 64 << 10
	}
	return 0
}

// A value left for the second statement is nil until it is read: a value
// read is never nil (slab.keep).
func unread(kv *mvccpb.KeyValue) bool { return kv != nil && kv.Value == nil }

// unreadValue is whether e's own value is still to be read: a delete has
// none.
func unreadValue(e *Event) bool { return e.Type == mvccpb.PUT && unread(e.Kv) }

// withValues leaves out of evs the entries whose values were not read,
// and the prev_kvs whose values were not: rows retention removed between
// a page's two statements.
func withValues(evs []*Event) []*Event {
	out := evs[:0]
	for _, e := range evs {
		if unread(e.PrevKv) {
			e.PrevKv = nil
		}
		if e.Type == mvccpb.DELETE || !unread(e.Kv) {
			out = append(out, e)
		}
	}
	return out
}

// keyLog reads the page of key's changes after the cursor into sp, from
// the key's newest row before the cursor's revision on (LogPageSQL.KeyPage):
// the rows at or before the cursor (two at most) are the first entry's
// prev_kv. One key's log is a chain: each change's prev_kv is the change
// before it, the same bytes, not a copy. A revision changes a key at most
// once (etcd refuses a transaction that puts a key twice or puts and
// deletes it; overlapping deletes remove it once), so rev alone orders one
// key's rows, in the (key, rev) index's order: ordering by (rev, sub) made
// SQLite copy every row, value and all, into a sorter first.
func (s *Store) keyLog(ctx context.Context, key []byte, after LogCursor, sp *logSpan) ([]*Event, error) {
	inline := s.inlineBytes()
	sl := s.newSlab()
	var evs []*Event
	err := func() error {
		// Two rows at most before the entries, and one after them.
		rows, err := s.readRows(ctx, s.sql.LogPage.KeyPage, inline, key, key, after.Rev, sp.rows(3))
		if err != nil {
			return err
		}
		defer rows.Close() // once the page is full: no more rows are made
		// The last row read, unless a delete, and its value's size.
		var prev *mvccpb.KeyValue
		prevLen := -1
		var value blob
		for rows.Next() {
			kv := &mvccpb.KeyValue{Key: key}
			var c LogCursor
			var n, deleted, unixMs int64
			if err := rows.Scan(&c.Rev, &c.Sub, &n, &value, &kv.CreateRevision, &kv.Version, &kv.Lease, &deleted, &unixMs); err != nil {
				return err
			}
			if deleted != 0 {
				n = 0 // a delete's kv has no value
			}
			kv.ModRevision = c.Rev
			entry := after.before(c)
			if entry && !sp.add(c, eventSize(len(key), int(n), prevLen)) {
				return nil
			}
			e := logEvent(kv, deleted, unixMs, value, &sl)
			if e.Type == mvccpb.PUT && int(n) > inline {
				kv.Value = nil
			}
			if entry {
				e.PrevKv = prev
				evs = append(evs, e)
			}
			prev, prevLen = nil, -1
			if e.Type == mvccpb.PUT {
				prev, prevLen = kv, int(n)
			}
		}
		return rows.Err()
	}()
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	var left []*mvccpb.KeyValue // in revision order
	if unread(evs[0].PrevKv) {
		left = append(left, evs[0].PrevKv)
	}
	for _, e := range evs {
		if unreadValue(e) {
			left = append(left, e.Kv)
		}
	}
	if len(left) == 0 {
		return evs, nil
	}
	rows, err := s.readRows(ctx, s.sql.LogPage.KeyValues, key, left[0].ModRevision, left[len(left)-1].ModRevision, inline)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var value blob
	for rows.Next() {
		var rev int64
		if err := rows.Scan(&rev, &value); err != nil {
			return nil, err
		}
		for len(left) > 0 && left[0].ModRevision < rev {
			left = left[1:]
		}
		if len(left) > 0 && left[0].ModRevision == rev {
			left[0].Value = sl.keep(value)
		}
	}
	return evs, rows.Err()
}

// narrowRange is the most changes after a page's cursor that a range may
// hold and still be read through the (key, rev) index: sorting that many
// rows' revisions and sizes (no value) costs less than reading the log
// from the cursor on when the range holds a small part of it
// (BenchmarkRangeLog, ADR-020).
var narrowRange = 2048

// isNarrow is whether kr holds at most narrowRange changes in all,
// counted through the (key, rev) index and no further: a count of those
// after the cursor would read a wide range's whole history to find the
// few after a recent cursor.
func (s *Store) isNarrow(ctx context.Context, kr KeyRange) (bool, error) {
	var n int
	err := s.readRow(ctx, s.sql.LogPage.Narrow.of(kr), append(kr.args(nil), narrowRange+1)...).Scan(&n)
	return n <= narrowRange, err
}

// rangeLog reads the page of the changes in kr after the cursor into sp.
// A range that holds many changes is read through the log's (rev, sub)
// index from the cursor on, and at most logScanRows rows of it (window):
// a page reads the log between its first entry and its last, not the
// range's history before it, nor more of the log than that when the range
// holds little of it; a page that stops there without filling returns
// where it stopped (cut). A narrow one is read through its keys' (key,
// rev) index, its rows sorted without their values, which a second
// statement reads for the page's entries only. Each entry's prev_kv is
// looked up, the page's only.
func (s *Store) rangeLog(ctx context.Context, kr KeyRange, after LogCursor, sp *logSpan) (evs []*Event, cut LogCursor, err error) {
	inline := s.inlineBytes()
	pageSQL, valuesSQL := &s.sql.LogPage.Page, &s.sql.LogPage.Values
	narrow, err := s.isNarrow(ctx, kr)
	if err != nil {
		return nil, cut, err
	}
	end, windowed := LogCursor{Rev: math.MaxInt64, Sub: math.MaxInt64}, false
	if narrow {
		// The rows are sorted: none carries a value but an empty one.
		pageSQL, valuesSQL, inline = &s.sql.LogPage.PageByKey, &s.sql.LogPage.ValuesByKey, 0
	} else if w, ok, err := s.window(ctx, after, false); err != nil {
		return nil, cut, err
	} else if ok {
		end, windowed = w, true
	}
	if evs, err = s.rangePage(ctx, kr, after, end, sp, inline, pageSQL, valuesSQL); err != nil {
		return nil, cut, err
	}
	if windowed && !sp.more {
		cut = end
	}
	return evs, cut, nil
}

// rangePage is rangeLog's page of the changes in kr in (after, end] with
// the statements given.
func (s *Store) rangePage(ctx context.Context, kr KeyRange, after, end LogCursor, sp *logSpan, inline int, pageSQL, valuesSQL *Spans) ([]*Event, error) {
	sl := s.newSlab()
	var evs []*Event
	var at []LogCursor // each entry's
	err := func() error {
		args := append(kr.args([]any{inline, inline, after.Rev, after.Sub, end.Rev, end.Sub}), sp.rows(1))
		rows, err := s.readRows(ctx, pageSQL.of(kr), args...)
		if err != nil {
			return err
		}
		defer rows.Close() // once the page is full: no more rows are made
		var key, value, pValue blob
		for rows.Next() {
			kv := &mvccpb.KeyValue{}
			var c LogCursor
			var n, deleted, unixMs int64
			var pRev, pLen, pCreate, pVersion, pLease, pDeleted sql.NullInt64
			if err := rows.Scan(&c.Rev, &c.Sub, &key, &n, &value, &kv.CreateRevision, &kv.Version, &kv.Lease, &deleted, &unixMs,
				&pRev, &pLen, &pValue, &pCreate, &pVersion, &pLease, &pDeleted); err != nil {
				return err
			}
			if deleted != 0 {
				n = 0 // a delete's kv has no value
			}
			prevLen := -1
			if pRev.Valid && pDeleted.Int64 == 0 {
				prevLen = int(pLen.Int64)
			}
			if !sp.add(c, eventSize(len(key.b), int(n), prevLen)) {
				return nil
			}
			kv.ModRevision = c.Rev
			kv.Key = sl.keep(key)
			e := logEvent(kv, deleted, unixMs, value, &sl)
			if e.Type == mvccpb.PUT && int(n) > inline {
				kv.Value = nil
			}
			if prevLen >= 0 {
				e.PrevKv = &mvccpb.KeyValue{Key: kv.Key, Value: sl.keep(pValue), CreateRevision: pCreate.Int64, ModRevision: pRev.Int64, Version: pVersion.Int64, Lease: pLease.Int64}
				if prevLen > inline {
					e.PrevKv.Value = nil
				}
			}
			evs = append(evs, e)
			at = append(at, c)
		}
		return rows.Err()
	}()
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	// The span of the entries with a value left to read.
	first, last := -1, -1
	for i, e := range evs {
		if unreadValue(e) || unread(e.PrevKv) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return evs, nil
	}
	args := kr.args([]any{inline, inline, at[first].Rev, at[first].Sub, at[last].Rev, at[last].Sub})
	rows, err := s.readRows(ctx, valuesSQL.of(kr), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var value, pValue blob
	i := first
	for rows.Next() {
		var c LogCursor
		if err := rows.Scan(&c.Rev, &c.Sub, &value, &pValue); err != nil {
			return nil, err
		}
		for i <= last && at[i].before(c) {
			i++
		}
		if i > last || at[i] != c {
			continue // retention removed it
		}
		if e := evs[i]; unreadValue(e) && value.b != nil {
			e.Kv.Value = sl.keep(value)
		}
		if e := evs[i]; unread(e.PrevKv) && pValue.b != nil {
			e.PrevKv.Value = sl.keep(pValue)
		}
	}
	return evs, rows.Err()
}
