package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The live index's values (ADR-041). Every live key's row stays in the
// index; its value stays only while the values held fit the value budget.
// Past it, the owner of the tree (the writer on SQLite, the tailer on
// PostgreSQL) lets the least recently read values go with a clock sweep:
// each entry has a reference bit that reads set; the sweep walks the keys
// from where it last stopped, clears the bits it finds set, and turns the
// entries it finds clear cold, until the values held are an eighth below
// the budget (so that it runs once per few MiB written, not per batch). A
// value written or loaded starts with its bit clear.
//
// A read that returns a cold entry's value takes it from the database's
// current row of the key (fillCold), which is the same row unless the key
// was written since the index's snapshot: then its mod_revision differs,
// and the read is made again on a newer snapshot. A value is never read
// from a row other than the one the index names, so every answer is still
// one revision's state.

// coldRetries bounds how many times a read whose cold keys moved on is made
// again on a newer snapshot before SQL answers it: a key written between
// every snapshot and its read of the database is rare, and SQL's answer is
// as right, only slower.
const coldRetries = 3

// errColdMoved says a cold key was written after the snapshot a read took:
// the read is made again on a newer one.
var errColdMoved = errors.New("live index: a cold key moved on")

// sweep turns warm entries cold, the least recently read first, until the
// values held are an eighth below the room the budget leaves them.
func (c *liveIndex) sweep() {
	room := c.valueRoom()
	target := room - room/8
	need := c.valueBytes - target
	var freed int64
	var evict []*entry
	visit := func(e *entry) bool {
		c.hand = e.key
		switch {
		case e.cold:
		case e.used.Load():
			e.used.Store(false)
		default:
			evict = append(evict, e)
			freed += e.valueCost()
		}
		return freed < need
	}
	// Two full turns at most: the first may only clear bits.
	for turn := 0; freed < need && turn < 3; turn++ {
		if c.hand == nil {
			c.tree.Ascend(visit)
		} else {
			c.tree.AscendGreaterOrEqual(probe(c.hand), visit)
		}
		if freed < need {
			c.hand = nil // wrap around
		}
	}
	for _, e := range evict {
		c.tree.ReplaceOrInsert(coldEntry(e))
		c.valueBytes -= e.valueCost()
	}
	if c.hand != nil {
		c.hand = bytes.Clone(c.hand) // not the evicted value's key slice's array
	}
}

// fillCold sets the values of kvs, copies of cold entries a read of the
// index returns, from the database's current rows of their keys, read in
// one snapshot of the readers' pool. It answers errColdMoved if a key's
// row there is not the one the index named.
func (s *Store) fillCold(ctx context.Context, kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 0 {
		return nil
	}
	metrics.LiveIndexColdReads.Add(float64(len(kvs)))
	tx, done, err := s.readTx(ctx)
	if err != nil {
		return fmt.Errorf("read cold values: %w", err)
	}
	defer done()
	sl := s.newSlab()
	return readCold(ctx, tx, &s.sql.Current, &sl, kvs)
}

// readCold fills kvs' values from q, one Get for one key and one range
// read (rows between the first and last key) for more: the rows of an
// answer lie close together, so the range reads few rows it does not need.
// Values are kept in sl, as the driver returned them where it can (a page
// of 10,000 cold values is then 10,000 allocations, not 20,000).
func readCold(ctx context.Context, q querier, cur *CurrentSQL, sl *slab, kvs []*mvccpb.KeyValue) error {
	if len(kvs) == 1 {
		row, err := getCurrent(ctx, q, cur, kvs[0].Key)
		if err != nil {
			return fmt.Errorf("read a cold value: %w", err)
		}
		if row == nil {
			return errColdMoved // deleted since
		}
		return takeCold(kvs[0], row.ModRevision, row.Value)
	}
	byKey := slices.Clone(kvs)
	slices.SortFunc(byKey, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	last := byKey[len(byKey)-1].Key
	kr := NewKeyRange(byKey[0].Key, append(slices.Clip(last), 0))
	rows, err := q.QueryContext(ctx, cur.Range.of(kr), kr.args(nil)...)
	if err != nil {
		return fmt.Errorf("read cold values: %w", err)
	}
	defer rows.Close()
	i := 0
	for i < len(byKey) && rows.Next() {
		var key, value blob
		var create, mod, version, lease int64
		if err := rows.Scan(&key, &value, &create, &mod, &version, &lease); err != nil {
			return fmt.Errorf("read cold values: %w", err)
		}
		switch c := bytes.Compare(byKey[i].Key, key.b); {
		case c < 0:
			return errColdMoved // deleted since
		case c == 0:
			if err := takeCold(byKey[i], mod, sl.keep(value)); err != nil {
				return err
			}
			i++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read cold values: %w", err)
	}
	if i < len(byKey) {
		return errColdMoved
	}
	return nil
}

// takeCold sets kv's value from the database's current row of its key, at
// mod_revision mod, if that is still the row kv is.
func takeCold(kv *mvccpb.KeyValue, mod int64, value []byte) error {
	if mod != kv.ModRevision {
		return errColdMoved
	}
	kv.Value = value
	return nil
}

// errOutOfStep says the writer found the live index and the database
// disagreeing on a committed row: the batch fails and the index is read
// again.
var errOutOfStep = errors.New("live index out of step with the database")

// rowOf is the committed row an entry of the writer's tree stands for, with
// its value: a cold one is read in the writer's transaction (q), whose
// snapshot is the index's revision, so its row there must be the entry's;
// if it is not, the index is out of step with the database and the batch
// fails (the caller marks it stale).
func rowOf(ctx context.Context, q querier, cur *CurrentSQL, e *entry) (*mvccpb.KeyValue, error) {
	if e == nil {
		return nil, nil
	}
	if !e.cold {
		return e.row(), nil
	}
	metrics.LiveIndexColdReads.Inc()
	row, err := getCurrent(ctx, q, cur, e.key)
	if err != nil {
		return nil, err
	}
	if row == nil || row.ModRevision != e.mod {
		return nil, fmt.Errorf("%w: %q at mod_revision %d in the index, %v in the database", errOutOfStep, e.key, e.mod, row)
	}
	return row, nil
}
