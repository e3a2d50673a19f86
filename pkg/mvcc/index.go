package mvcc

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"

	"github.com/google/btree"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The live index: every live key in memory, read through immutable
// snapshots (ADR-008, ADR-016). It is an index, not a cache: while it
// serves, it is the authority for reads at the latest revision (and on
// SQLite for the writer's compares), and it never misses.
//
// One goroutine at a time changes the tree. On SQLite that is the writer,
// the database's only one (one process, one writer goroutine; the file is
// locked against a second server): it applies each committed batch's
// events to its own tree, then publishes a copy-on-write clone with the
// batch's revision before it answers anyone, so a read that starts after an
// acknowledged write sees it. On PostgreSQL it is the tailer, which applies
// every replica's batches in revision order, and reads wait for the index
// to reach the database's revision (index_replica.go). A snapshot is never
// written after it is published.
//
// It is all or nothing: it answers a range only by holding every key there
// is, so a count or a list never needs SQL. When the live data outgrows its
// budget the index is dropped and reads go back to SQL.

// indexItemOverhead approximates what an indexed row costs beyond its key and
// value: the KeyValue struct and its slot in the tree.
const indexItemOverhead = 160

func kvLess(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }

func kvCost(kv *mvccpb.KeyValue) int64 {
	return int64(len(kv.Key) + len(kv.Value) + indexItemOverhead)
}

// snapshot is the live keys at revision rev.
type snapshot struct {
	rev   int64
	tree  *btree.BTreeG[*mvccpb.KeyValue]
	bytes int64
}

// liveIndex is the writer's tree and the latest published snapshot.
type liveIndex struct {
	limit int64
	pub   atomic.Pointer[snapshot]

	// Owned by the writer goroutine on SQLite, by the tailer's lock on
	// PostgreSQL (and by Open before either starts).
	tree  *btree.BTreeG[*mvccpb.KeyValue]
	bytes int64
	// stale means the database may hold a state the tree lacks (a commit
	// whose outcome is unknown, or revisions a replica skipped); the tree
	// is reloaded before it serves.
	stale bool
}

// loadIndex reads every live key inside q's snapshot (at revision rev)
// with all (CurrentSQL.All). It returns nil when the live data exceeds
// limit.
func loadIndex(ctx context.Context, q querier, all string, rev, limit int64) (*liveIndex, error) {
	c := &liveIndex{limit: limit, tree: btree.NewG(32, kvLess)}
	err := eachCurrent(ctx, q, all, nil, func(kv *mvccpb.KeyValue) bool {
		c.tree.ReplaceOrInsert(kv)
		c.bytes += kvCost(kv)
		return c.bytes <= limit
	})
	if err != nil || c.bytes > limit {
		return nil, err
	}
	c.publish(rev)
	return c, nil
}

func (c *liveIndex) publish(rev int64) {
	c.pub.Store(&snapshot{rev: rev, tree: c.tree.Clone(), bytes: c.bytes})
	metrics.LiveIndexBytes.Set(float64(c.bytes))
}

// apply folds one committed batch into the tree and publishes it. It
// reports false when the live data has outgrown the budget: the caller
// drops the index.
func (c *liveIndex) apply(rev int64, evs []*Event) bool {
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

// ascend calls visit with the rows of tree in kr, in key order, until it
// returns false.
func ascend(tree *btree.BTreeG[*mvccpb.KeyValue], kr KeyRange, visit func(*mvccpb.KeyValue) bool) {
	switch {
	case kr.Empty():
	case kr.Single():
		if kv, ok := tree.Get(&mvccpb.KeyValue{Key: kr.Key}); ok {
			visit(kv)
		}
	case kr.Unbounded:
		tree.AscendGreaterOrEqual(&mvccpb.KeyValue{Key: kr.Key}, visit)
	default:
		tree.AscendRange(&mvccpb.KeyValue{Key: kr.Key}, &mvccpb.KeyValue{Key: kr.End}, visit)
	}
}

// ascend is the writer's walk over the committed rows in kr.
func (c *liveIndex) ascend(kr KeyRange, visit func(*mvccpb.KeyValue) bool) { ascend(c.tree, kr, visit) }

// get is the writer's read of a committed row: nil if the key is absent.
func (c *liveIndex) get(key []byte) *mvccpb.KeyValue {
	kv, _ := c.tree.Get(&mvccpb.KeyValue{Key: key})
	return kv
}

// rangeIndexed answers a Range at the latest revision from the live index;
// ok is false when no index serves or the request asks for another
// revision (on PostgreSQL: any revision given, or a request SQL refuses),
// and true with an error when the read fence failed.
func (s *Store) rangeIndexed(ctx context.Context, r *pb.RangeRequest) (*RangeResult, bool, error) {
	c := s.index.Load()
	if c == nil {
		return nil, false, nil
	}
	var snap *snapshot
	if s.replica == nil {
		snap = c.pub.Load()
	} else {
		// Another replica may have compacted past this index's revision,
		// which SQL checks: only the latest revision is read here. Bad
		// requests go there too, to be refused without waiting.
		if r.Revision > 0 || len(r.Key) == 0 || !validSort(r) {
			return nil, false, nil
		}
		var err error
		if snap, err = s.replicaSnapshot(ctx, r.Serializable); err != nil {
			return nil, true, err
		}
	}
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
		// values), never the indexed one. Key and value bytes are shared;
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
	ascend(snap.tree, kr, visit)
	if r.CountOnly {
		return res, true, nil
	}
	return finishRange(res, kvs, r, order, sortByValue, filtered), true, nil
}

// indexBatch folds a committed batch into the live index (publish.go).
func (s *Store) indexBatch(rev int64, evs []*Event) {
	c := s.index.Load()
	if c == nil || c.stale {
		return // none, or reloaded at the start of the next batch
	}
	if !c.apply(rev, evs) {
		s.dropIndex(fmt.Sprintf("the live keys (%d bytes) outgrew the live index budget (%d bytes)", c.bytes, c.limit))
	}
}

// staleIndex stops the live index serving after a commit whose outcome is
// unknown (the database may hold a state it lacks), or once it was found
// out of step with the database. On SQLite the next batch reads it again
// (batch_sqlite.go), on PostgreSQL the tailer's next catch-up
// (index_replica.go).
func (s *Store) staleIndex() {
	if c := s.index.Load(); c != nil {
		c.stale = true
		c.pub.Store(nil)
	}
}

// reloadIndex reads the live index again inside the writer's transaction,
// whose snapshot is exactly the committed state at revision rev, and
// returns it (nil when the live keys outgrew the budget: it is dropped).
func (s *Store) reloadIndex(ctx context.Context, q querier, rev int64) (*liveIndex, error) {
	c := s.index.Load()
	if c == nil {
		return nil, nil
	}
	fresh, err := loadIndex(ctx, q, s.sql.Current.All, rev, c.limit)
	if err != nil {
		return nil, err
	}
	if fresh == nil {
		s.dropIndex(fmt.Sprintf("the live keys outgrew the live index budget (%d bytes)", c.limit))
		return nil, nil
	}
	s.index.Store(fresh)
	return fresh, nil
}

func (s *Store) dropIndex(why string) {
	if c := s.index.Load(); c != nil {
		c.pub.Store(nil)
	}
	s.index.Store(nil)
	s.indexChanged() // reads waiting for it go to SQL
	metrics.LiveIndexBytes.Set(0)
	s.log.Warn("live index dropped: reads at the latest revision go to the database", "reason", why)
}
