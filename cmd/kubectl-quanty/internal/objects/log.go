package objects

import (
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// Change is one entry of a key's log, as a person reads it.
type Change struct {
	Revision     int64    `json:"revision"`
	Time         string   `json:"time"`
	UnixMs       int64    `json:"unixMs"`
	Action       string   `json:"action"` // created, updated, deleted, restored
	RestoredFrom int64    `json:"restoredFrom,omitempty"`
	Changes      []string `json:"changes,omitempty"`
	// Note says why the changes are not known.
	Note string `json:"note,omitempty"`
}

// Changes tells the entries of one key's log (oldest first): a write of a
// value the key held before, over another one, is a restore of the
// revision that last wrote it (what kubectl quanty restore writes is the
// old value itself).
func Changes(entries []*historypb.LogEntry) []Change {
	written := map[string]int64{} // a value -> the last revision that wrote it
	var rows []Change
	for _, e := range entries {
		r := Change{Revision: e.GetRevision(), UnixMs: e.GetUnixMs()}
		cur, prev := e.GetKv(), e.GetPrevKv()
		switch {
		case e.GetDeleted() != 0:
			r.Action = "deleted"
		case written[string(cur.GetValue())] != 0 && (prev == nil || string(prev.GetValue()) != string(cur.GetValue())):
			r.Action, r.RestoredFrom = "restored", written[string(cur.GetValue())]
		case cur.GetVersion() == 1:
			r.Action = "created"
		default:
			r.Action = "updated"
		}
		if r.Action != "deleted" {
			written[string(cur.GetValue())] = r.Revision
		}
		if r.Action == "updated" || r.Action == "restored" && prev != nil {
			r.Changes, r.Note = ChangesOf(prev, cur)
		}
		rows = append(rows, r)
	}
	return rows
}

// ChangesOf is the fields a write changed, or why they are not known.
func ChangesOf(prev, cur *mvccpb.KeyValue) ([]string, string) {
	if prev == nil {
		return nil, "the state before is no longer retained"
	}
	a, b := Decode(prev.GetValue()), Decode(cur.GetValue())
	switch {
	case a.Encrypted != "" || b.Encrypted != "":
		return nil, "encrypted at rest"
	case a.Object == nil || b.Object == nil:
		return nil, "not a Kubernetes object"
	}
	return ChangedFields(a.Object, b.Object), ""
}
