package mvcc

import (
	"bytes"
	"log/slog"
	"testing"
	"unsafe"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Events read from the log share their reader's chunks (slab) with other
// events' keys and values, prev_kv included. The live index on PostgreSQL
// keeps copies of what it takes from them, or one small live key would
// keep a whole chunk alive that its budget does not count; a replica's own
// events (the requests' bytes, as on SQLite) it keeps as they are.
func TestReplicaIndexCopiesWhatTheLogShares(t *testing.T) {
	chunk := []byte("/k/a" + "value-a" + "/k/b" + "value-b")
	evs := func() []*Event {
		return []*Event{
			{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: chunk[0:4], Value: chunk[4:11], CreateRevision: 2, ModRevision: 2, Version: 1}},
			{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: chunk[11:15], Value: chunk[15:22], CreateRevision: 2, ModRevision: 2, Version: 1}},
		}
	}
	for _, fromLog := range []bool{true, false} {
		s := &Store{log: slog.New(slog.DiscardHandler), replica: &replicaState{}}
		c := &liveIndex{limit: 1 << 20, valueLimit: 1 << 20, tree: btree.NewG(32, entryLess)}
		c.publish(1)
		s.index.Store(c)
		s.followIndex(1, 2, evs(), fromLog)
		snap := c.pub.Load()
		if snap.rev != 2 || snap.tree.Len() != 2 {
			t.Fatalf("fromLog %v: the index is at revision %d with %d keys, want 2 and 2", fromLog, snap.rev, snap.tree.Len())
		}
		e, _ := snap.tree.Get(probe([]byte("/k/b")))
		kv := e.row()
		if !bytes.Equal(kv.Value, []byte("value-b")) || kv.ModRevision != 2 || kv.Version != 1 {
			t.Fatalf("fromLog %v: /k/b is %v", fromLog, kv)
		}
		shares := unsafe.SliceData(kv.Value) == &chunk[15] || unsafe.SliceData(kv.Key) == &chunk[11]
		if shares == fromLog {
			t.Errorf("fromLog %v: the indexed key and value share the events' chunk: %v", fromLog, shares)
		}
	}
}
