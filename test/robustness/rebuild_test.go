package robustness

import (
	"encoding/json"
	"strings"
	"testing"

	"go.etcd.io/etcd/tests/v3/robustness/model"
)

func TestRebuild(t *testing.T) {
	r := sampleRun()
	got, err := Rebuild(r.reports(), r.revs)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, kv := range []string{"start=true", "key0=1", "key0=2", "tombstone=true"} {
		k, v, _ := cut(kv)
		want = append(want, asJSON(t, putRequest(k, v, 0)))
	}
	if len(got.Requests) != len(want) || got.Revisions != 4 {
		t.Fatalf("rebuilt %d requests for %d revisions, want 4", len(got.Requests), got.Revisions)
	}
	for i, req := range got.Requests {
		if s := asJSON(t, req); s != want[i] {
			t.Errorf("request %d: %s, want %s", i, s, want[i])
		}
	}
}

// TestRebuildRejects: a history the client requests cannot have made is
// refused, with the revision that gives it away.
func TestRebuildRejects(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(revs []Revision) []Revision
	}{
		{"a value no client wrote", "revision 3 (put key0=\"9\") is explained by no client request", func(revs []Revision) []Revision {
			revs[1].Changes[0].Value = []byte("9")
			return revs
		}},
		{"a change no client asked for", "revision 4 (delete key0) is explained by no client request", func(revs []Revision) []Revision {
			revs[2].Changes = []Change{{Delete: true, Key: "key0"}}
			return revs
		}},
		{"a lease no client gave", "revision 4 (put key0=\"2\" with lease 7) is explained by no client request", func(revs []Revision) []Revision {
			revs[2].Changes[0].Lease = 7
			return revs
		}},
		{"one write twice", "revision 4 (put key0=\"1\") is explained by no client request", func(revs []Revision) []Revision {
			revs[2] = Revision{Rev: 4, Changes: revs[1].Changes}
			return revs
		}},
		{"a write at a revision its answer did not give", "revision 4 (put tombstone=\"true\") is explained by no client request: {\"Type\":\"txn\"", func(revs []Revision) []Revision {
			revs[2], revs[3] = Revision{Rev: 4, Changes: revs[3].Changes}, Revision{Rev: 5, Changes: revs[2].Changes}
			return revs
		}},
		{"a revision missing", "revision 3 is missing from the history", func(revs []Revision) []Revision {
			return append(revs[:1], revs[2:]...)
		}},
		{"a store not empty at the start", "starts at revision 3", func(revs []Revision) []Revision {
			return revs[1:]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sampleRun()
			_, err := Rebuild(r.reports(), tc.change(r.revs))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Rebuild: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestCompareWithWAL: the comparison with etcd's WAL ignores what leaves
// no revision (grants, compactions, writes that changed nothing) and
// catches any other difference.
func TestCompareWithWAL(t *testing.T) {
	r := sampleRun()
	rebuilt, err := Rebuild(r.reports(), r.revs)
	if err != nil {
		t.Fatal(err)
	}
	wal := []model.EtcdRequest{
		rebuilt.Requests[0],
		{Type: model.LeaseGrant, LeaseGrant: &model.LeaseGrantRequest{LeaseID: 5}},
		rebuilt.Requests[1],
		deleteRequest("absent"),
		{Type: model.Compact, Compact: &model.CompactRequest{Revision: 3}},
		rebuilt.Requests[2],
		rebuilt.Requests[3],
	}
	if n, err := CompareWithWAL(rebuilt.Requests, wal); err != nil || n != 4 {
		t.Fatalf("CompareWithWAL of the same writes: %d, %v; want 4 and no error", n, err)
	}
	swapped := append([]model.EtcdRequest(nil), wal...)
	swapped[2], swapped[5] = swapped[5], swapped[2]
	if _, err := CompareWithWAL(rebuilt.Requests, swapped); err == nil || !strings.Contains(err.Error(), "revision 3") {
		t.Errorf("CompareWithWAL of two writes in the other order: %v, want a difference at revision 3", err)
	}
	if _, err := CompareWithWAL(rebuilt.Requests[:3], wal); err == nil {
		t.Errorf("CompareWithWAL with a request missing: no error")
	}
}

func putRequest(key, value string, lease int64) model.EtcdRequest {
	return model.EtcdRequest{Type: model.Txn, Txn: &model.TxnRequest{
		OperationsOnSuccess: []model.EtcdOperation{{Type: model.PutOperation, Put: model.PutOptions{Key: key, Value: model.ToValueOrHash(value), LeaseID: lease}}},
	}}
}

func deleteRequest(key string) model.EtcdRequest {
	return model.EtcdRequest{Type: model.Txn, Txn: &model.TxnRequest{
		OperationsOnSuccess: []model.EtcdOperation{{Type: model.DeleteOperation, Delete: model.DeleteOptions{Key: key}}},
	}}
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
