package mvcc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A batch that could not begin its transaction runs nothing more on the
// writer's connection: every statement through q fails with why.
func TestFailedQuerierRunsNothing(t *testing.T) {
	why := errors.New("the lock was not taken")
	tx := &replicaTx{failed: why}
	q := tx.q()
	ctx := context.Background()
	var one int
	if err := q.QueryRowContext(ctx, "SELECT 1").Scan(&one); !errors.Is(err, why) {
		t.Errorf("QueryRowContext: %v, want %v", err, why)
	}
	if _, err := q.QueryContext(ctx, "SELECT 1"); !errors.Is(err, why) {
		t.Errorf("QueryContext: %v, want %v", err, why)
	}
	if _, err := q.ExecContext(ctx, "DELETE FROM current"); !errors.Is(err, why) {
		t.Errorf("ExecContext: %v, want %v", err, why)
	}
}

// replicaRows keeps what batches keep touching: a working set that fits half
// its budget stays whole however often it is rewritten, and a key read
// from the older generation moves to the newer one before that is dropped.
func TestReplicaRowsKeepTheWorkingSet(t *testing.T) {
	var m replicaRows
	value := make([]byte, 1000)
	n := replicaRowsBytes / 2 / replicaRowSize("k/00000", &mvccpb.KeyValue{Value: value}) * 9 / 10
	key := func(i int) string { return fmt.Sprintf("k/%05d", i) }
	for i := range n {
		m.put(key(i), &mvccpb.KeyValue{Key: []byte(key(i)), Value: value})
	}
	// Updates, as a batch does them: read the row, write the new one.
	for pass := range 5 {
		for i := range n {
			if _, ok := m.get(key(i)); !ok {
				t.Fatalf("update pass %d: %s, in a working set of %d that fits, was dropped", pass, key(i), n)
			}
			m.put(key(i), &mvccpb.KeyValue{Key: []byte(key(i)), Value: value})
		}
	}
	// Other keys fill the newer generation: it becomes the older one,
	// and then is dropped unless what is read from it moves up.
	m.put("hot", &mvccpb.KeyValue{Value: value})
	for i := range 2 * n {
		m.put(fmt.Sprintf("other/%05d", i), &mvccpb.KeyValue{Value: value})
		if i%100 == 0 {
			if _, ok := m.get("hot"); !ok {
				t.Fatalf("a key read every 100 puts was dropped after %d", i)
			}
		}
	}
	if _, ok := m.get(key(0)); ok {
		t.Fatalf("%s, untouched through two generations, is still held", key(0))
	}
}

type plainDialect struct{ ReplicaDialect }

type markingDialect struct{ plainDialect }

func (markingDialect) MarksWriter() {}

// A replica's batches mark meta only where the dialect keeps the mark,
// each replica with its own; the state a batch leaves carries the new
// mark only when the batch moved the revision.
func TestWriterMark(t *testing.T) {
	if m := writerMark(plainDialect{}); m != 0 {
		t.Errorf("a dialect that keeps no mark got mark %d, want 0", m)
	}
	a, b := writerMark(markingDialect{}), writerMark(markingDialect{})
	if a <= 0 || b <= 0 || a == b {
		t.Errorf("two replicas' marks: %d and %d, want distinct and positive", a, b)
	}
	start := BatchStart{Rev: 10, Compact: 2, LastUnixMs: 1000, Writer: b}
	if got, want := (batchEnd{start: start, rev: 12, compact: 2, unixMs: 1005}).next(a), (BatchStart{Rev: 12, Compact: 2, LastUnixMs: 1005, Writer: a}); got != want {
		t.Errorf("after a write: %+v, want %+v", got, want)
	}
	if got, want := (batchEnd{start: start, rev: 10, compact: 5, unixMs: 1005}).next(a), (BatchStart{Rev: 10, Compact: 5, LastUnixMs: 1000, Writer: b}); got != want {
		t.Errorf("after a compaction alone: %+v, want %+v", got, want)
	}
}
