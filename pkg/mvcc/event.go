package mvcc

import "go.etcd.io/etcd/api/v3/mvccpb"

// Event is one change of one key, as the watch API delivers it. Events and
// their KeyValues are shared (watchers, the Hub's ring, the live index)
// and read-only.
type Event struct {
	Type   mvccpb.Event_EventType
	Kv     *mvccpb.KeyValue // for a delete: key and mod_revision only
	PrevKv *mvccpb.KeyValue // nil on create
	UnixMs int64
}

// Rev is the revision that made the change.
func (e *Event) Rev() int64 { return e.Kv.ModRevision }

// Size approximates the bytes the event occupies in memory and on the wire.
func (e *Event) Size() int {
	n := 64 + len(e.Kv.Key) + len(e.Kv.Value)
	if e.PrevKv != nil {
		n += 48 + len(e.PrevKv.Key) + len(e.PrevKv.Value)
	}
	return n
}
