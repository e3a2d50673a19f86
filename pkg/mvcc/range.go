package mvcc

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// querier runs the dialect's statements: a read or SQLite batch
// transaction through prepTx, or a replica batch's connection.
type querier = Querier

// RangeResult is a Range answer before it becomes a RangeResponse.
type RangeResult struct {
	Rev   int64 // the store's revision at the read
	Kvs   []*mvccpb.KeyValue
	Count int64
	More  bool
}

// Range reads the latest state or a past revision, exactly as etcd does
// (ReadView): from the live index when it serves the revision asked for,
// otherwise from SQL.
func (s *Store) Range(ctx context.Context, r *pb.RangeRequest) (*RangeResult, error) {
	if s.replica == nil {
		return s.rangeOnce(ctx, r)
	}
	// Taken before the read, whose snapshot then covers it; a
	// serializable read may be behind anyway.
	seen := s.seenRev()
	res, err := s.rangeOnce(ctx, r)
	if err != nil {
		return nil, err
	}
	if res.Rev < seen && !r.Serializable {
		// The database lost revisions this process handed out
		// (regress.go): answered once it has moved past them.
		if err := s.followLoss(); err != nil {
			return nil, err
		}
		if res, err = s.rangeOnce(ctx, r); err != nil {
			return nil, err
		}
	}
	storeMax(&s.replica.shown, res.Rev)
	return res, nil
}

func (s *Store) rangeOnce(ctx context.Context, r *pb.RangeRequest) (*RangeResult, error) {
	if res, ok, err := s.rangeIndexed(ctx, r); ok {
		return res, err
	}
	if res, ok, err := s.rangeLatest(ctx, r); ok || err != nil {
		return res, err
	}
	tx, done, err := s.readTx(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	// The revision is read in the same snapshot as the data.
	var rev, compact int64
	if err := tx.QueryRowContext(ctx, s.sql.Meta.RevFloor).Scan(&rev, &compact); err != nil {
		return nil, err
	}
	return s.rangeAt(ctx, tx, r, s.shownRev(rev), rev, compact)
}

// shownRev is the revision a read whose snapshot is at rev answers at and
// reports (kv.go: a response reports only revisions every later read
// sees). On SQLite the snapshot may hold batches the writer has committed
// but not yet published (publish.go): reads of the live index do not see
// them yet, so the read answers at the published revision, which its
// snapshot holds (a revision is committed before it is published; loaded
// after the snapshot began, it is the newest one the snapshot may lack).
// Where replicas share the database, every committed revision is one all
// later reads see: a read at the latest revision first waits for the
// revision the database has (index_replica.go).
func (s *Store) shownRev(rev int64) int64 {
	if s.replica != nil {
		return rev
	}
	return min(rev, s.publishedRev.Load())
}

// rangeLatest answers the commonest Range, a get of one key at the latest
// revision, in one statement: one statement reads one snapshot, so the
// revision comes from meta in the same SELECT and no transaction is needed.
// ok is false for any other Range, and for a snapshot that holds a batch
// not yet published (shownRev): the other path reads it at the published
// revision. (Ranges of many keys stay on the other path: joined this way,
// SQLite sorts them again instead of reading the index in order.)
func (s *Store) rangeLatest(ctx context.Context, r *pb.RangeRequest) (*RangeResult, bool, error) {
	kr := NewKeyRange(r.Key, r.RangeEnd)
	if r.Revision > 0 || r.CountOnly || len(r.Key) == 0 || !kr.Single() || !validSort(r) {
		return nil, false, nil
	}
	order, filtered, _, sortByValue, keysOnly := rangePlan(r)
	q := s.sql.Range.Latest
	if keysOnly {
		q = s.sql.Range.LatestKeys
	}
	rows, err := s.readRows(ctx, q, kr.Key)
	if err != nil {
		return nil, true, err
	}
	defer rows.Close()
	res := &RangeResult{}
	var kvs []*mvccpb.KeyValue
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		var create, mod, version, lease sql.NullInt64
		if err := rows.Scan(&res.Rev, &kv.Key, &kv.Value, &create, &mod, &version, &lease); err != nil {
			return nil, true, err
		}
		if kv.Key == nil {
			continue // the LEFT JOIN's row when no key matched
		}
		kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease = create.Int64, mod.Int64, version.Int64, lease.Int64
		kvs = append(kvs, kv)
	}
	if err := rows.Err(); err != nil {
		return nil, true, err
	}
	if s.shownRev(res.Rev) != res.Rev {
		return nil, false, nil
	}
	res.Count = int64(len(kvs))
	return finishRange(res, kvs, r, order, sortByValue, filtered), true, nil
}

// rangePlan is what a Range asks of SQL: the sort left to do in Go (NONE
// when key order from the index suffices), whether revision filters apply,
// the rows SQL may stop at (0 when sorting or filtering needs every row),
// and whether values must be read.
func rangePlan(r *pb.RangeRequest) (order pb.RangeRequest_SortOrder, filtered bool, limit int64, sortByValue, keysOnly bool) {
	order = r.SortOrder
	switch {
	case r.SortTarget != pb.RangeRequest_KEY && order == pb.RangeRequest_NONE:
		order = pb.RangeRequest_ASCEND
	case r.SortTarget == pb.RangeRequest_KEY && order == pb.RangeRequest_ASCEND:
		order = pb.RangeRequest_NONE // rows already come in key order
	}
	filtered = r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
	limit = r.Limit
	switch {
	case filtered || limit < 0:
		limit = 0 // filters need every row; truncate afterwards
	case order != pb.RangeRequest_NONE && r.SortOrder == pb.RangeRequest_NONE:
		// etcd reads every row only for a sort the request asked for by
		// order: with a target but no order it sorts the first limit+1
		// keys (server/etcdserver/txn executeRange), and so does this.
		if limit > 0 {
			limit++
		}
	case order != pb.RangeRequest_NONE:
		limit = 0 // a sort needs every row; truncate afterwards
	}
	// keys_only still sorts by the values it does not return.
	sortByValue = order != pb.RangeRequest_NONE && r.SortTarget == pb.RangeRequest_VALUE
	keysOnly = r.KeysOnly && !sortByValue
	return
}

func validSort(r *pb.RangeRequest) bool {
	_, okO := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]
	_, okT := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]
	return okO && okT
}

// rangeIn answers r inside q, whose snapshot is at revision rev.
func (s *Store) rangeIn(ctx context.Context, q querier, r *pb.RangeRequest, rev, compact int64) (*RangeResult, error) {
	return s.rangeAt(ctx, q, r, rev, rev, compact)
}

// rangeAt answers r inside q, whose snapshot is at revision rev, as the
// store was at revision head <= rev: head is the latest revision and the
// one the answer reports.
func (s *Store) rangeAt(ctx context.Context, q querier, r *pb.RangeRequest, head, rev, compact int64) (*RangeResult, error) {
	if len(r.Key) == 0 {
		return nil, ErrEmptyKey
	}
	if !validSort(r) {
		return nil, ErrInvalidSort
	}
	at := r.Revision
	if at > head {
		return nil, ErrFutureRev
	}
	if at > 0 && at < compact {
		return nil, ErrCompacted
	}
	if at <= 0 {
		at = head
	}
	res := &RangeResult{Rev: head}
	kr := NewKeyRange(r.Key, r.RangeEnd)
	if kr.Empty() {
		return res, nil
	}

	order, filtered, limit, sortByValue, keysOnly := rangePlan(r)
	var kvs []*mvccpb.KeyValue
	if r.CountOnly || limit > 0 {
		// Count is the whole range, however few rows the limit lets through.
		count, err := s.count(ctx, q, kr, at, rev)
		if err != nil {
			return nil, err
		}
		res.Count = count
		if r.CountOnly || count == 0 {
			return res, nil
		}
		if limit >= count {
			limit = 0
		}
		if kvs, err = s.fetch(ctx, q, kr, at, rev, limit, keysOnly, count); err != nil {
			return nil, err
		}
	} else {
		var err error
		if kvs, err = s.fetch(ctx, q, kr, at, rev, 0, keysOnly, 0); err != nil {
			return nil, err
		}
		res.Count = int64(len(kvs))
	}
	return finishRange(res, kvs, r, order, sortByValue, filtered), nil
}

// finishRange applies what SQL did not: revision filters, sorts other than
// by key, hiding values sorted on, and the limit.
func finishRange(res *RangeResult, kvs []*mvccpb.KeyValue, r *pb.RangeRequest, order pb.RangeRequest_SortOrder, sortByValue, filtered bool) *RangeResult {
	count := res.Count
	if filtered {
		out := kvs[:0]
		for _, kv := range kvs {
			if (r.MinModRevision != 0 && kv.ModRevision < r.MinModRevision) ||
				(r.MaxModRevision != 0 && kv.ModRevision > r.MaxModRevision) ||
				(r.MinCreateRevision != 0 && kv.CreateRevision < r.MinCreateRevision) ||
				(r.MaxCreateRevision != 0 && kv.CreateRevision > r.MaxCreateRevision) {
				continue
			}
			out = append(out, kv)
		}
		kvs = out
	}
	if order != pb.RangeRequest_NONE {
		sortKVs(kvs, r.SortTarget, order == pb.RangeRequest_DESCEND)
	}
	if r.KeysOnly && sortByValue {
		for _, kv := range kvs {
			kv.Value = nil
		}
	}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs = kvs[:r.Limit]
		res.More = true
	} else if r.Limit > 0 && !filtered && int64(len(kvs)) < count {
		res.More = true
	}
	res.Kvs = kvs
	return res
}

func sortKVs(kvs []*mvccpb.KeyValue, target pb.RangeRequest_SortTarget, desc bool) {
	var less func(a, b *mvccpb.KeyValue) int
	switch target {
	case pb.RangeRequest_KEY:
		less = func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) }
	case pb.RangeRequest_VERSION:
		less = func(a, b *mvccpb.KeyValue) int { return cmp64(a.Version, b.Version) }
	case pb.RangeRequest_CREATE:
		less = func(a, b *mvccpb.KeyValue) int { return cmp64(a.CreateRevision, b.CreateRevision) }
	case pb.RangeRequest_MOD:
		less = func(a, b *mvccpb.KeyValue) int { return cmp64(a.ModRevision, b.ModRevision) }
	case pb.RangeRequest_VALUE:
		less = func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Value, b.Value) }
	}
	sort.SliceStable(kvs, func(i, j int) bool {
		if desc {
			return less(kvs[j], kvs[i]) < 0
		}
		return less(kvs[i], kvs[j]) < 0
	})
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// the rows attached to that lease (a write batch's compares, deletes and
// revocations).
func scanCurrent(ctx context.Context, q querier, cur *CurrentSQL, kr KeyRange, lease int64) ([]*mvccpb.KeyValue, error) {
	query, args := cur.ByLease, []any{lease}
	if lease == 0 {
		query, args = cur.Range.of(kr), kr.args(nil)
	}
	var out []*mvccpb.KeyValue
	err := eachCurrent(ctx, q, query, args, func(kv *mvccpb.KeyValue) bool {
		out = append(out, kv)
		return true
	})
	return out, err
}

// eachCurrent runs query, one of CurrentSQL's (key, value, create_rev,
// mod_rev, version, lease), and calls f with each row until f returns
// false.
func eachCurrent(ctx context.Context, q querier, query string, args []any, f func(*mvccpb.KeyValue) bool) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		if err := rows.Scan(&kv.Key, &kv.Value, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease); err != nil {
			return err
		}
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		if !f(kv) {
			return nil
		}
	}
	return rows.Err()
}

// readTx opens a read transaction on the reader pool (one snapshot:
// REPEATABLE READ on PostgreSQL, a WAL read on SQLite), running its
// queries through the pool's prepared statements. Call done when finished.
// The isolation is asked for here, not left to a session default, which a
// pooler's server connections would not have (ADR-026); SQLite ignores it.
func (s *Store) readTx(ctx context.Context) (tx prepTx, done func(), err error) {
	sqltx, err := s.rdb.BeginTx(ctx, readTxOptions)
	if err != nil {
		return prepTx{}, nil, err
	}
	return prepTx{tx: sqltx, p: s.rstmts}, func() { sqltx.Rollback() }, nil
}

// readTxOptions: the header revision a read takes from meta and the rows
// it returns come from one snapshot.
var readTxOptions = &sql.TxOptions{Isolation: sql.LevelRepeatableRead}

// getCurrent reads key's current row inside q (nil: absent).
func getCurrent(ctx context.Context, q querier, cur *CurrentSQL, key []byte) (*mvccpb.KeyValue, error) {
	kv := &mvccpb.KeyValue{Key: key}
	return rowKV(kv, q.QueryRowContext(ctx, cur.Get, key).
		Scan(&kv.Value, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease))
}

// rowKV finishes reading one row into kv (err is Scan's): nil when there
// was no row, and an empty value where the column is NULL.
func rowKV(kv *mvccpb.KeyValue, err error) (*mvccpb.KeyValue, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if kv.Value == nil {
		kv.Value = []byte{}
	}
	return kv, nil
}
