package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// A range delete in a batch on SQLite with a live index (sqliteTx).

// deleteStep bounds the keys one statement of a range delete removes.
// Nothing in SQLite holds a step's rows any more (BatchSQL.InsertDeletes
// keeps no statement journal, and its numbering window drops each row once
// numbered), but one statement for 20,000 keys still took 4-8% longer than
// steps of 2,000 (docs/benchmarks/range-delete.md).
const deleteStep = 2000

// deleteRange deletes the live keys in kr with a few statements per
// deleteStep keys, all in the batch's one transaction and revision. The
// rows come from the live index and the batch's own writes, not from SQL:
// the events and prev_kv share the index's rows instead of copies read
// back. Without a live index it leaves the range to the caller.
func (t *sqliteTx) deleteRange(kr KeyRange, rev, sub, unixMs int64) ([]*mvccpb.KeyValue, bool, error) {
	if t.index == nil {
		return nil, false, nil
	}
	prevs, err := t.rangeRows(kr)
	if err != nil {
		return nil, false, err
	}
	for _, kv := range prevs {
		t.bulk += int64(len(kv.Key) + len(kv.Value))
	}
	for i := 0; i < len(prevs); i += deleteStep {
		step := prevs[i:min(i+deleteStep, len(prevs))]
		first, last := step[0].Key, step[len(step)-1].Key
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{t.b.s.sql.Batch.InsertDeletes, []any{rev, sub + int64(i), unixMs, first, last}},
			{t.b.s.sql.Batch.DeleteCurrents, []any{first, last}},
		} {
			res, err := t.tx.ExecContext(t.ctx, q.sql, q.args...)
			if err != nil {
				return nil, false, err
			}
			// The table and the live index must agree on the keys in the
			// step, or the log's sub numbers would not be the events'. If
			// they do not, the index is wrong: the batch fails, and the
			// next one (the requests retried alone) reloads it from the
			// table first.
			if n, err := res.RowsAffected(); err != nil || n != int64(len(step)) {
				err = fmt.Errorf("%w: delete range: %d rows in [%q, %q] where the live index has %d (%v)", errOutOfStep, n, first, last, len(step), err)
				t.outOfStep(err)
				return nil, false, err
			}
		}
	}
	if len(prevs) < goneMin {
		for _, kv := range prevs {
			t.rows[string(kv.Key)] = nil
		}
		return prevs, true, nil
	}
	// Every key in kr is deleted now: those the batch staged, and those
	// of the index it did not read, which goneByRange answers for.
	for k, kv := range t.rows {
		if kv != nil && kr.Contains(kv.Key) {
			t.rows[k] = nil
		}
	}
	t.gone = append(t.gone, kr)
	return prevs, true, nil
}

// rangeRows is the live keys in kr as this transaction sees them: the
// index's, with this batch's writes over them, in key order. The values of
// cold entries are read in the transaction.
func (t *sqliteTx) rangeRows(kr KeyRange) ([]*mvccpb.KeyValue, error) {
	var out, cold []*mvccpb.KeyValue
	t.index.ascend(kr, func(e *entry) bool {
		var kv *mvccpb.KeyValue
		if staged, ok := t.rows[string(e.key)]; ok {
			kv = staged
		} else if !t.goneByRange(e.key) {
			kv = e.row()
			if e.cold {
				cold = append(cold, kv)
			}
		}
		if kv != nil {
			out = append(out, kv)
		}
		return true
	})
	if len(cold) > 0 {
		metrics.LiveIndexColdReads.Add(float64(len(cold)))
		sl := t.b.s.newSlab()
		if err := readCold(t.ctx, t.tx, &t.b.s.sql.Current, &sl, cold); err != nil {
			if errors.Is(err, errColdMoved) {
				err = fmt.Errorf("%w: delete range [%q, %q]", errOutOfStep, kr.Key, kr.End)
				t.outOfStep(err)
			}
			return nil, err
		}
	}
	// Keys the batch created: the index does not hold them yet.
	n := len(out)
	for _, kv := range t.rows {
		if kv != nil && kr.Contains(kv.Key) && t.index.get(kv.Key) == nil {
			out = append(out, kv)
		}
	}
	if len(out) > n {
		slices.SortFunc(out, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	}
	return out, nil
}

// outOfStep fails the batch when the live index was found out of step with
// the database: the next batch (the requests retried alone) reloads it
// from the table first.
func (t *sqliteTx) outOfStep(err error) {
	t.b.s.log.Error("reloading the live index", "err", err)
	t.b.uncertain = true
	t.b.s.staleIndex()
}

// goneMin is the fewest keys a range delete records as a range rather
// than key by key: every get that rows does not answer, and every range
// delete, checks each range, so small deletes, which a batch may hold
// many of, stay in rows.
const goneMin = 256

// goneByRange reports whether one of the batch's range deletes removed
// key, which rows does not hold.
func (t *sqliteTx) goneByRange(key []byte) bool {
	for _, kr := range t.gone {
		if kr.Contains(key) {
			return true
		}
	}
	return false
}
