package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/google/btree"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The live index: every live key in memory, read through immutable
// snapshots (ADR-008, ADR-016). It is an index, not a cache: while it
// serves, it is the authority for reads at the latest revision (and on
// SQLite for the writer's compares), and it never misses a key.
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
// It holds every live key's row (key, revisions, version, lease), and the
// values of as many as its value budget allows (ADR-041): the others are
// cold, and a read that returns one takes its value from the database
// (index_values.go). The rows are all or nothing: it answers a range only
// by holding every key there is, so a count or a list never needs SQL.
// When the rows and the held values outgrow the index's budget it is
// dropped and reads go back to SQL.

// indexItemOverhead approximates what an indexed row costs beyond its key
// and value: the entry (112 bytes with the allocator's rounding), and its
// slot and share of a node in the tree.
const indexItemOverhead = 128

// entry is one live key of the index: its row, and its value while warm
// (key and value bytes shared with the events that carried them, which
// nothing writes). A cold entry has no value. The row is held in the entry
// itself, not as a KeyValue: one allocation a key, and one pointer fewer
// to follow in every comparison. Entries are replaced, never changed,
// except for used.
type entry struct {
	key, value                  []byte
	create, mod, version, lease int64
	size                        int // the value's length, held or not
	cold                        bool
	// used is the sweep's reference bit (index_values.go): set by a read
	// of the entry, cleared when the sweep passes it.
	used atomic.Bool
}

func entryLess(a, b *entry) bool { return bytes.Compare(a.key, b.key) < 0 }

// probe is an entry to look key up with.
func probe(key []byte) *entry { return &entry{key: key} }

// warmEntry holds kv's row and value. Its reference bit starts clear: a
// value nobody has read since it was written (most of kube-apiserver's,
// whose watch cache serves the reads) goes first.
func warmEntry(kv *mvccpb.KeyValue) *entry {
	return &entry{key: kv.Key, value: kv.Value, create: kv.CreateRevision, mod: kv.ModRevision,
		version: kv.Version, lease: kv.Lease, size: len(kv.Value)}
}

// coldEntry is e without its value.
func coldEntry(e *entry) *entry {
	return &entry{key: e.key, create: e.create, mod: e.mod, version: e.version, lease: e.lease, size: e.size, cold: true}
}

// row is e as a KeyValue of its own (without a value if cold).
func (e *entry) row() *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: e.key, Value: e.value, CreateRevision: e.create, ModRevision: e.mod, Version: e.version, Lease: e.lease}
}

func rowCost(e *entry) int64 { return int64(len(e.key) + indexItemOverhead) }

// valueCost is what e holds of values.
func (e *entry) valueCost() int64 {
	if e.cold {
		return 0
	}
	return int64(len(e.value))
}

// snapshot is the live keys at revision rev.
type snapshot struct {
	rev  int64
	tree *btree.BTreeG[*entry]
	live int64 // the bytes of every live key's value, held or not
}

// liveIndex is the writer's tree and the latest published snapshot.
type liveIndex struct {
	limit      int64 // rows and held values together
	valueLimit int64 // held values
	pub        atomic.Pointer[snapshot]

	// Owned by the writer goroutine on SQLite, by the tailer's lock on
	// PostgreSQL (and by Open before either starts).
	tree       *btree.BTreeG[*entry]
	rowBytes   int64 // every live key's row
	valueBytes int64 // the values warm entries hold
	liveValues int64 // every live key's value, held or not
	hand       []byte
	// stale means the database may hold a state the tree lacks (a commit
	// whose outcome is unknown, or revisions a replica skipped); the tree
	// is reloaded before it serves.
	stale bool
}

// indexBudget is what a live index may hold: limit in all (rows and
// values), and of that at most values of values.
type indexBudget struct{ limit, values int64 }

func (s *Store) indexBudget() indexBudget {
	return indexBudget{limit: s.opts.LiveIndexBytes, values: s.opts.LiveIndexValueBytes}
}

// loadIndex reads every live key inside q's snapshot (at revision rev)
// with all (CurrentSQL.All), keeping values, in key order, while they fit
// the value budget. It returns nil when the rows exceed the budget.
func loadIndex(ctx context.Context, q querier, all string, rev int64, b indexBudget) (*liveIndex, error) {
	c := &liveIndex{limit: b.limit, valueLimit: b.values, tree: btree.NewG(32, entryLess)}
	err := eachCurrent(ctx, q, all, nil, func(kv *mvccpb.KeyValue) bool {
		e := warmEntry(kv)
		c.rowBytes += rowCost(e)
		if c.valueBytes+int64(len(kv.Value)) > c.valueRoom() {
			e = coldEntry(e)
		}
		c.tree.ReplaceOrInsert(e)
		c.valueBytes += e.valueCost()
		c.liveValues += int64(e.size)
		return c.rowBytes <= c.limit
	})
	if err != nil || c.rowBytes > c.limit {
		return nil, err
	}
	c.publish(rev)
	return c, nil
}

// bytes is what the index holds: its rows and its values.
func (c *liveIndex) bytes() int64 { return c.rowBytes + c.valueBytes }

func (c *liveIndex) publish(rev int64) {
	c.pub.Store(&snapshot{rev: rev, tree: c.tree.Clone(), live: c.liveValues})
	metrics.LiveIndexBytes.Set(float64(c.bytes()))
	metrics.LiveIndexKeys.Set(float64(c.tree.Len()))
	metrics.LiveIndexValueBytes.Set(float64(c.valueBytes))
	metrics.LiveValueBytes.Set(float64(c.liveValues))
	metrics.LiveIndexValueBudget.Set(float64(c.valueLimit))
}

// apply folds one committed batch into the tree, lets go of values past
// the value budget, and publishes it. It reports false when the live keys
// have outgrown the budget: the caller drops the index.
func (c *liveIndex) apply(rev int64, evs []*Event) bool {
	for _, e := range evs {
		if e.Type == mvccpb.DELETE {
			if old, ok := c.tree.Delete(probe(e.Kv.Key)); ok {
				c.forget(old)
			}
			continue
		}
		n := warmEntry(e.Kv)
		if old, ok := c.tree.ReplaceOrInsert(n); ok {
			c.forget(old)
		}
		c.rowBytes += rowCost(n)
		c.valueBytes += n.valueCost()
		c.liveValues += int64(n.size)
	}
	if c.rowBytes > c.limit {
		return false
	}
	if c.valueBytes > c.valueRoom() {
		c.sweep()
	}
	c.publish(rev)
	return true
}

// valueRoom is how much of values the index may hold: the value budget,
// within what the rows leave of the whole budget.
func (c *liveIndex) valueRoom() int64 { return max(0, min(c.valueLimit, c.limit-c.rowBytes)) }

func (c *liveIndex) logLoaded(log *slog.Logger, budget int64) {
	log.Info("live index loaded", "keys", c.tree.Len(), "row_bytes", c.rowBytes, "value_bytes", c.valueBytes,
		"budget", budget, "value_budget", c.valueLimit, "revision", c.pub.Load().rev)
}

// forget takes a removed entry out of the counts.
func (c *liveIndex) forget(old *entry) {
	c.rowBytes -= rowCost(old)
	c.valueBytes -= old.valueCost()
	c.liveValues -= int64(old.size)
}

// ascend calls visit with the entries of tree in kr, in key order, until it
// returns false.
func ascend(tree *btree.BTreeG[*entry], kr KeyRange, visit func(*entry) bool) {
	switch {
	case kr.Empty():
	case kr.Single():
		if e, ok := tree.Get(probe(kr.Key)); ok {
			visit(e)
		}
	case kr.Unbounded:
		tree.AscendGreaterOrEqual(probe(kr.Key), visit)
	default:
		tree.AscendRange(probe(kr.Key), probe(kr.End), visit)
	}
}

// ascend is the writer's walk over the committed entries in kr.
func (c *liveIndex) ascend(kr KeyRange, visit func(*entry) bool) { ascend(c.tree, kr, visit) }

// get is the writer's read of a committed entry: nil if the key is absent.
func (c *liveIndex) get(key []byte) *entry {
	e, _ := c.tree.Get(probe(key))
	return e
}

// rangeIndexed answers a Range at the latest revision from the live index;
// ok is false when no index serves or the request asks for another
// revision (on PostgreSQL: any revision given, or a request SQL refuses),
// and true with an error when the read fence failed. A read whose cold
// values moved on in the database before it read them is made again on a
// newer snapshot, and after coldRetries of those SQL answers it.
func (s *Store) rangeIndexed(ctx context.Context, r *pb.RangeRequest) (*RangeResult, bool, error) {
	for try := 0; ; try++ {
		res, ok, err := s.rangeIndexedOnce(ctx, r)
		if !errors.Is(err, errColdMoved) {
			return res, ok, err
		}
		if try == coldRetries {
			return nil, false, nil
		}
	}
}

func (s *Store) rangeIndexedOnce(ctx context.Context, r *pb.RangeRequest) (*RangeResult, bool, error) {
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
	var kvs, cold []*mvccpb.KeyValue
	var store []mvccpb.KeyValue
	visit := func(e *entry) bool {
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
		out.Key, out.CreateRevision, out.ModRevision, out.Version, out.Lease = e.key, e.create, e.mod, e.version, e.lease
		if !keysOnly {
			out.Value = e.value
			if e.cold {
				cold = append(cold, out)
			} else if !e.used.Load() {
				e.used.Store(true)
			}
		}
		kvs = append(kvs, out)
		return true
	}
	ascend(snap.tree, kr, visit)
	if r.CountOnly {
		return res, true, nil
	}
	if len(cold) == 0 {
		return finishRange(res, kvs, r, order, sortByValue, filtered), true, nil
	}
	if sortByValue {
		if err := s.fillCold(ctx, cold); err != nil {
			return nil, true, err
		}
		return finishRange(res, kvs, r, order, sortByValue, filtered), true, nil
	}
	// Only the values the answer keeps are read: filters and the limit
	// come first.
	res = finishRange(res, kvs, r, order, sortByValue, filtered)
	if len(res.Kvs) < len(kvs) {
		kept := make(map[*mvccpb.KeyValue]bool, len(res.Kvs))
		for _, kv := range res.Kvs {
			kept[kv] = true
		}
		cold = slices.DeleteFunc(cold, func(kv *mvccpb.KeyValue) bool { return !kept[kv] })
	}
	if err := s.fillCold(ctx, cold); err != nil {
		return nil, true, err
	}
	return res, true, nil
}

// indexBatch folds a committed batch into the live index (publish.go).
func (s *Store) indexBatch(rev int64, evs []*Event) {
	c := s.index.Load()
	if c == nil || c.stale {
		return // none, or reloaded at the start of the next batch
	}
	if !c.apply(rev, evs) {
		s.dropIndex(fmt.Sprintf("the live keys (%d bytes) outgrew the live index budget (%d bytes)", c.rowBytes, c.limit))
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
	fresh, err := loadIndex(ctx, q, s.sql.Current.All, rev, indexBudget{limit: c.limit, values: c.valueLimit})
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
	metrics.LiveIndexKeys.Set(0)
	metrics.LiveIndexValueBytes.Set(0)
	metrics.LiveValueBytes.Set(0)
	s.log.Warn("live index dropped: reads at the latest revision go to the database", "reason", why)
}
