package mvcc

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/google/btree"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The current-state cache: an in-memory copy of every live key, kept by the
// writer and read through immutable snapshots (ADR-008).
//
// Only a store whose writer is the sole mutator may have one (SQLite: one
// process, one writer goroutine; the file is locked against a second
// server). The writer applies each committed batch's events to its own
// tree, then publishes a copy-on-write clone with the batch's revision
// before it answers anyone, so a read that starts after an acknowledged
// write sees it. A snapshot is never written after it is published.
//
// The cache is all or nothing: it answers a range only by holding every key
// there is, so a count or a list never needs SQL. When the live data
// outgrows its budget the cache is dropped and reads go back to SQL.

// cacheItemOverhead approximates what a cached row costs beyond its key and
// value: the KeyValue struct and its slot in the tree.
const cacheItemOverhead = 160

func kvLess(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }

func kvCost(kv *mvccpb.KeyValue) int64 {
	return int64(len(kv.Key) + len(kv.Value) + cacheItemOverhead)
}

// snapshot is the live keys at revision rev.
type snapshot struct {
	rev   int64
	tree  *btree.BTreeG[*mvccpb.KeyValue]
	bytes int64
}

// currentCache is the writer's tree and the latest published snapshot.
type currentCache struct {
	limit int64
	pub   atomic.Pointer[snapshot]

	// Owned by the writer goroutine (and by Open before it starts).
	tree  *btree.BTreeG[*mvccpb.KeyValue]
	bytes int64
	// stale means the database may hold a state the tree lacks (a commit
	// whose outcome is unknown); the tree is reloaded before it serves.
	stale bool
}

// loadCache reads every live key inside q's snapshot (at revision rev). It
// returns nil when the live data exceeds limit.
func loadCache(ctx context.Context, q querier, rev, limit int64) (*currentCache, error) {
	rows, err := q.QueryContext(ctx, `SELECT key, value, create_rev, mod_rev, version, lease FROM current ORDER BY key`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	c := &currentCache{limit: limit, tree: btree.NewG(32, kvLess)}
	for rows.Next() {
		kv := &mvccpb.KeyValue{}
		if err := rows.Scan(&kv.Key, &kv.Value, &kv.CreateRevision, &kv.ModRevision, &kv.Version, &kv.Lease); err != nil {
			return nil, err
		}
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		c.tree.ReplaceOrInsert(kv)
		if c.bytes += kvCost(kv); c.bytes > limit {
			return nil, rows.Close()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.publish(rev)
	return c, nil
}

func (c *currentCache) publish(rev int64) {
	c.pub.Store(&snapshot{rev: rev, tree: c.tree.Clone(), bytes: c.bytes})
	metrics.CacheBytes.Set(float64(c.bytes))
}

// apply folds one committed batch into the tree and publishes it. It
// reports false when the live data has outgrown the budget: the caller
// drops the cache.
func (c *currentCache) apply(rev int64, evs []*Event) bool {
	for _, e := range evs {
		if e.Type == mvccpb.DELETE {
			if old, ok := c.tree.Delete(e.Kv); ok {
				c.bytes -= kvCost(old)
			}
			continue
		}
		if old, ok := c.tree.ReplaceOrInsert(e.Kv); ok {
			c.bytes -= kvCost(old)
		}
		c.bytes += kvCost(e.Kv)
	}
	if c.bytes > c.limit {
		return false
	}
	c.publish(rev)
	return true
}

// get is the writer's read of a committed row: nil if the key is absent.
func (c *currentCache) get(key []byte) *mvccpb.KeyValue {
	kv, _ := c.tree.Get(&mvccpb.KeyValue{Key: key})
	return kv
}

// rangeCached answers a Range at the latest revision from the cache; ok is
// false when there is no cache or the request asks for another revision.
func (s *Store) rangeCached(r *pb.RangeRequest) (*RangeResult, bool, error) {
	c := s.cache.Load()
	if c == nil {
		return nil, false, nil
	}
	snap := c.pub.Load()
	if snap == nil || (r.Revision > 0 && r.Revision != snap.rev) {
		return nil, false, nil
	}
	if len(r.Key) == 0 {
		return nil, true, ErrEmptyKey
	}
	if !validSort(r) {
		return nil, true, ErrInvalidSort
	}
	res := &RangeResult{Rev: snap.rev}
	kr := NewKeyRange(r.Key, r.RangeEnd)
	if kr.Empty() {
		return res, true, nil
	}
	order, filtered, limit, sortByValue, keysOnly := rangePlan(r)
	var kvs []*mvccpb.KeyValue
	var store []mvccpb.KeyValue
	visit := func(kv *mvccpb.KeyValue) bool {
		res.Count++
		if r.CountOnly || (limit > 0 && int64(len(kvs)) >= limit) {
			return true // keep counting
		}
		if len(store) == 0 {
			// KeyValues in chunks, sized to the answer's likely length.
			n := min(max(len(kvs), 16), 1024)
			if kr.Single() {
				n = 1
			} else if limit > 0 {
				n = int(min(limit-int64(len(kvs)), int64(n)))
			}
			store = make([]mvccpb.KeyValue, n)
		}
		// A copy: callers may change the KeyValue (finishRange hides
		// values), never the cached one. Key and value bytes are shared;
		// nothing writes them.
		out := &store[0]
		store = store[1:]
		out.Key, out.CreateRevision, out.ModRevision, out.Version, out.Lease = kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease
		if !keysOnly {
			out.Value = kv.Value
		}
		kvs = append(kvs, out)
		return true
	}
	switch {
	case kr.Single():
		if kv, ok := snap.tree.Get(&mvccpb.KeyValue{Key: kr.Key}); ok {
			visit(kv)
		}
	case kr.Unbounded:
		snap.tree.AscendGreaterOrEqual(&mvccpb.KeyValue{Key: kr.Key}, visit)
	default:
		snap.tree.AscendRange(&mvccpb.KeyValue{Key: kr.Key}, &mvccpb.KeyValue{Key: kr.End}, visit)
	}
	if r.CountOnly {
		return res, true, nil
	}
	return finishRange(res, kvs, r, order, sortByValue, filtered), true, nil
}

// cacheBatch is called by the writer after every commit attempt: it folds a
// committed batch in, or marks the cache stale when a commit's outcome is
// unknown.
func (s *Store) cacheBatch(rev int64, evs []*Event, committed bool) {
	c := s.cache.Load()
	if c == nil {
		return
	}
	if !committed {
		c.stale = true
		c.pub.Store(nil)
		return
	}
	if c.stale {
		return // reloaded at the start of the next batch
	}
	if !c.apply(rev, evs) {
		s.dropCache(fmt.Sprintf("the live keys (%d bytes) outgrew --cache-bytes (%d bytes)", c.bytes, c.limit))
	}
}

// refreshCache reloads a stale cache inside the writer's transaction, whose
// snapshot is exactly the committed state at revision rev.
func (s *Store) refreshCache(ctx context.Context, q querier, rev int64) error {
	c := s.cache.Load()
	if c == nil || !c.stale {
		return nil
	}
	// The writer's revision must be the database's: a commit reported as
	// failed that took effect would otherwise tag newer rows with an older
	// revision.
	var dbRev int64
	if err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'rev'`).Scan(&dbRev); err != nil {
		return err
	}
	if dbRev != rev {
		s.dropCache(fmt.Sprintf("the database is at revision %d but the writer at %d after a commit with an unknown outcome; restart to reload", dbRev, rev))
		return nil
	}
	fresh, err := loadCache(ctx, q, rev, c.limit)
	if err != nil {
		return err
	}
	if fresh == nil {
		s.dropCache(fmt.Sprintf("the live keys outgrew --cache-bytes (%d bytes)", c.limit))
		return nil
	}
	s.cache.Store(fresh)
	return nil
}

func (s *Store) dropCache(why string) {
	if c := s.cache.Load(); c != nil {
		c.pub.Store(nil)
	}
	s.cache.Store(nil)
	metrics.CacheBytes.Set(0)
	s.log.Warn("current-state cache dropped: reads go to the database", "reason", why)
}

var _ querier = (*sql.Tx)(nil)
