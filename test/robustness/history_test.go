package robustness

import (
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.etcd.io/etcd/tests/v3/robustness/identity"
	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/report"
)

// run is a small history as etcd's recording client records one: two
// clients one request at a time, and a watch of every key from revision 2
// with progress notifications, and the revisions the store's history
// holds for it. Tests change one thing in it.
type run struct {
	ops   [][]step // per client, in time order
	watch []model.WatchResponse
	revs  []Revision
}

// step is one request and its answer; rev 0 is an error.
type step struct {
	at          time.Duration // call; it returns a millisecond later
	put         string        // key=value, or
	get         string        // key, answered value at mod revision mod
	getRev      int64         // with get: a read at that revision
	value       string
	mod, header int64
}

func sampleRun() *run {
	ms := time.Millisecond
	return &run{
		ops: [][]step{
			{
				{at: 1 * ms, put: "start=true", header: 2},
				{at: 3 * ms, put: "key0=1", header: 3},
				{at: 7 * ms, put: "key0=2", header: 4},
				{at: 13 * ms, put: "tombstone=true", header: 5},
			},
			{
				{at: 5 * ms, get: "key0", value: "1", mod: 3, header: 3},
				{at: 9 * ms, get: "key0", value: "2", mod: 4, header: 4},
				{at: 11 * ms, get: "key0", getRev: 3, value: "1", mod: 3, header: 4},
			},
		},
		watch: []model.WatchResponse{
			{Time: 2 * ms, Revision: 2, Events: []model.WatchEvent{event(2, "start", "true", nil)}},
			{Time: 4 * ms, Revision: 3, Events: []model.WatchEvent{event(3, "key0", "1", nil)}},
			{Time: 5 * ms, Revision: 3, IsProgressNotify: true},
			{Time: 8 * ms, Revision: 4, Events: []model.WatchEvent{event(4, "key0", "2", &model.ValueRevision{Value: model.ToValueOrHash("1"), ModRevision: 3, Version: 1})}},
			{Time: 14 * ms, Revision: 5, Events: []model.WatchEvent{event(5, "tombstone", "true", nil)}},
		},
		revs: []Revision{
			{Rev: 2, Changes: []Change{{Key: "start", Value: []byte("true")}}},
			{Rev: 3, Changes: []Change{{Key: "key0", Value: []byte("1")}}},
			{Rev: 4, Changes: []Change{{Key: "key0", Value: []byte("2")}}},
			{Rev: 5, Changes: []Change{{Key: "tombstone", Value: []byte("true")}}},
		},
	}
}

func event(rev int64, key, value string, prev *model.ValueRevision) model.WatchEvent {
	return model.WatchEvent{
		PersistedEvent: model.PersistedEvent{
			Event:    model.Event{Type: model.PutOperation, Key: key, Value: model.ToValueOrHash(value)},
			Revision: rev,
			IsCreate: prev == nil,
		},
		PrevValue: prev,
	}
}

// reports records r's steps through etcd's own history recorder.
func (r *run) reports() []report.ClientReport {
	ids := identity.NewIDProvider()
	var out []report.ClientReport
	for _, steps := range r.ops {
		h := model.NewAppendableHistory(ids)
		for _, s := range steps {
			header := &pb.ResponseHeader{Revision: s.header}
			end := s.at + time.Millisecond
			switch {
			case s.put != "":
				k, v, _ := cut(s.put)
				h.AppendPut(k, v, s.at, end, &clientv3.PutResponse{Header: header}, nil)
			default:
				resp := &clientv3.GetResponse{Header: header}
				if s.value != "" {
					resp.Kvs = []*mvccpb.KeyValue{{Key: []byte(s.get), Value: []byte(s.value), ModRevision: s.mod, CreateRevision: 3, Version: s.mod - 2}}
					resp.Count = 1
				}
				h.AppendRange(s.get, "", s.getRev, 0, s.at, end, resp, nil)
			}
		}
		out = append(out, report.ClientReport{ClientID: ids.NewClientID(), KeyValue: h.Operations()})
	}
	watch := report.ClientReport{ClientID: ids.NewClientID(), Watch: []model.WatchOperation{{
		Request:   model.WatchRequest{Key: "", Revision: 2, WithPrefix: true, WithProgressNotify: true, WithPrevKV: true},
		Responses: r.watch,
	}}}
	return append(out, watch)
}

func cut(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}
