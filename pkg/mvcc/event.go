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
	prev := -1
	if e.PrevKv != nil {
		prev = len(e.PrevKv.Value)
	}
	return eventSize(len(e.Kv.Key), len(e.Kv.Value), prev)
}

// eventSize is Event.Size of a change of a key of key bytes to a value of
// value bytes (0 for a delete), whose prev_kv's value has prev bytes (-1:
// no prev_kv). A Log page adds up its entries' sizes with it before it
// reads their values (logpage.go), so it and Size never disagree.
func eventSize(key, value, prev int) int {
	n := 64 + key + value
	if prev >= 0 {
		n += 48 + key + prev
	}
	return n
}
