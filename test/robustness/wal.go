package robustness

import (
	"encoding/json"
	"fmt"
	"maps"

	"go.etcd.io/etcd/tests/v3/robustness/model"
)

// Effective is the part of a persisted list that made revisions: what
// Rebuild can make from a history. etcd's WAL holds every write it
// applied, those that changed nothing too, and its lease grants and
// compactions, which take no revision.
func Effective(reqs []model.EtcdRequest) []model.EtcdRequest {
	var out []model.EtcdRequest
	state := emptyState()
	for _, r := range reqs {
		next, _ := state.Step(r)
		if next.Revision != state.Revision {
			out = append(out, r)
		}
		state = next
	}
	return out
}

// CompareWithWAL reports whether rebuilt, made from a store's history,
// is what wal, read from etcd's WAL, says the store did: the same
// requests made the same revisions, in order, and etcd's replay of either
// gives the same keys, values and leases at every revision and the same
// watch events. It returns how many requests made revisions.
func CompareWithWAL(rebuilt, wal []model.EtcdRequest) (int, error) {
	a, b := Effective(rebuilt), Effective(wal)
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) {
			return 0, fmt.Errorf("the history gives %d requests that made revisions, the WAL %d", len(a), len(b))
		}
		ja, _ := json.Marshal(a[i])
		jb, _ := json.Marshal(b[i])
		if string(ja) != string(jb) {
			return 0, fmt.Errorf("revision %d: the history gives %s, the WAL %s", i+2, ja, jb)
		}
	}
	ra, rb := model.NewReplay(rebuilt), model.NewReplay(wal)
	for rev := int64(1); ; rev++ {
		sa, errA := ra.StateForRevision(rev)
		sb, errB := rb.StateForRevision(rev)
		if errA != nil || errB != nil {
			if (errA == nil) != (errB == nil) {
				return 0, fmt.Errorf("replays end at different revisions: %v, %v", errA, errB)
			}
			break
		}
		if !maps.Equal(sa.KeyValues, sb.KeyValues) || !maps.Equal(sa.KeyLeases, sb.KeyLeases) {
			return 0, fmt.Errorf("replays differ at revision %d: %v %v, the WAL's %v %v", rev, sa.KeyValues, sa.KeyLeases, sb.KeyValues, sb.KeyLeases)
		}
	}
	if len(ra.Events) != len(rb.Events) {
		return 0, fmt.Errorf("replays give %d and %d watch events", len(ra.Events), len(rb.Events))
	}
	for i := range ra.Events {
		if ra.Events[i] != rb.Events[i] {
			return 0, fmt.Errorf("watch event %d: %+v, the WAL's %+v", i, ra.Events[i], rb.Events[i])
		}
	}
	return len(a), nil
}
