package mvcc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// fuzzKeys are the keys the fuzz targets' stores hold: the edges of the
// byte order, keys that are prefixes of one another, invalid UTF-8.
var fuzzKeys = []string{"\x00", "\x00\x00", "a", "a\x00", "a/1", "a/2", "ab", "b", "\xc3\x28", "\xff", "\xff\xff", "z"}

// twoStores are a store answering latest reads from its live index and one
// answering every read from SQL, given the same writes: the two read paths
// must agree with each other and with etcd's rules.
type twoStores struct{ index, sql *mvcc.Store }

func openTwo(t testing.TB) twoStores {
	return twoStores{index: openStore(t, mvcc.Options{}), sql: openStore(t, mvcc.Options{DisableLiveIndex: true})}
}

// txn applies r to both stores and fails t if they answer differently.
func (s twoStores) txn(t testing.TB, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	t.Helper()
	a, errA := s.index.Txn(context.Background(), r)
	b, errB := s.sql.Txn(context.Background(), r)
	if fmt.Sprint(errA) != fmt.Sprint(errB) || !proto.Equal(a, b) {
		t.Fatalf("Txn %v:\nindex store: %v %v\nSQL store:   %v %v", r, a, errA, b, errB)
	}
	return a, errA
}

// history writes a history over fuzzKeys to both stores (puts, overwrites,
// deletes, a range delete, puts again) and returns the state after each
// revision, as etcd's rules make it (not as the stores read it back).
func (s twoStores) history(t testing.TB) map[int64]map[string]*mvccpb.KeyValue {
	cur := map[string]*mvccpb.KeyValue{}
	states := map[int64]map[string]*mvccpb.KeyValue{1: cur}
	rev := int64(1)
	write := func(puts map[string]string, dels ...mvcc.KeyRange) {
		r := &pb.TxnRequest{}
		next := maps.Clone(cur)
		for _, d := range dels {
			r.Success = append(r.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: d.Key, RangeEnd: d.End}}})
			for k := range next {
				if d.Contains([]byte(k)) {
					delete(next, k)
				}
			}
		}
		for k, v := range puts {
			r.Success = append(r.Success, putOp([]byte(k), v, 0))
			kv := &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v), CreateRevision: rev + 1, ModRevision: rev + 1, Version: 1}
			if old := next[k]; old != nil {
				kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
			}
			next[k] = kv
		}
		resp, err := s.txn(t, r)
		if err != nil {
			t.Fatal(err)
		}
		if rev++; resp.Header.Revision != rev {
			t.Fatalf("%v took revision %d, want %d", r, resp.Header.Revision, rev)
		}
		cur = next
		states[rev] = cur
	}
	for i, k := range fuzzKeys {
		write(map[string]string{k: fmt.Sprint("v", i)})
	}
	for i := 0; i < len(fuzzKeys); i += 3 {
		write(map[string]string{fuzzKeys[i]: fmt.Sprint("w", i)})
	}
	write(nil, mvcc.NewKeyRange([]byte("a/"), []byte("a0")))
	write(nil, mvcc.NewKeyRange([]byte("\xff"), nil))
	write(map[string]string{"a/1": "again", "\xff": "again"})
	return states
}

// FuzzRange sends any Range to a store that reads its live index and to
// one that reads SQL, over the same history: the two must give the same
// answer or the same error, and, for a plain read (key order, no filter),
// the answer etcd's rules give for the state at the revision read.
func FuzzRange(f *testing.F) {
	f.Add([]byte("a"), []byte("b"), int64(0), int64(0), false, false, int32(0), int32(0), int64(0), int64(0))
	f.Add([]byte{0}, []byte{0}, int64(3), int64(0), false, true, int32(0), int32(0), int64(0), int64(0))
	f.Add([]byte{0xff}, []byte{0}, int64(-1), int64(-1), false, false, int32(0), int32(0), int64(0), int64(0))
	f.Add([]byte("a"), []byte("a"), int64(0), int64(5), true, false, int32(0), int32(0), int64(0), int64(0))
	f.Add([]byte("b"), []byte("a"), int64(1), int64(2), false, false, int32(0), int32(0), int64(0), int64(0))
	f.Add([]byte{0}, []byte{0}, int64(2), int64(0), false, false, int32(2), int32(4), int64(0), int64(0))
	f.Add([]byte{0}, []byte{0}, int64(0), int64(8), false, false, int32(1), int32(3), int64(4), int64(20))
	f.Add([]byte("a"), []byte{}, int64(0), int64(99), false, false, int32(0), int32(0), int64(0), int64(0))
	f.Add([]byte{}, []byte{0}, int64(0), int64(0), false, false, int32(7), int32(0), int64(0), int64(0))
	s := openTwo(f)
	states := s.history(f)
	head := int64(len(states))
	const floor = 3
	for _, st := range []*mvcc.Store{s.index, s.sql} {
		if _, err := st.Compact(context.Background(), floor); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, key, end []byte, limit, rev int64, countOnly, keysOnly bool, order, target int32, minMod, maxCreate int64) {
		r := &pb.RangeRequest{Key: key, RangeEnd: end, Limit: limit, Revision: rev, CountOnly: countOnly, KeysOnly: keysOnly,
			SortOrder: pb.RangeRequest_SortOrder(order), SortTarget: pb.RangeRequest_SortTarget(target), MinModRevision: minMod, MaxCreateRevision: maxCreate}
		a, errA := s.index.Range(context.Background(), proto.Clone(r).(*pb.RangeRequest))
		b, errB := s.sql.Range(context.Background(), proto.Clone(r).(*pb.RangeRequest))
		if fmt.Sprint(errA) != fmt.Sprint(errB) {
			t.Fatalf("%v: index store: %v, SQL store: %v", r, errA, errB)
		}
		// etcd's order: the request's own checks, then the revision.
		_, okOrder := pb.RangeRequest_SortOrder_name[order]
		_, okTarget := pb.RangeRequest_SortTarget_name[target]
		var want error
		switch {
		case len(key) == 0:
			want = mvcc.ErrEmptyKey
		case !okOrder || !okTarget:
			want = mvcc.ErrInvalidSort
		case rev > head:
			want = mvcc.ErrFutureRev
		case rev > 0 && rev < floor:
			want = mvcc.ErrCompacted
		}
		if !errors.Is(errA, want) || (want == nil) != (errA == nil) {
			t.Fatalf("%v: %v, want %v", r, errA, want)
		}
		if errA != nil {
			return
		}
		if a.Rev != b.Rev || a.Count != b.Count || a.More != b.More || len(a.Kvs) != len(b.Kvs) {
			t.Fatalf("%v:\nindex store: rev %d count %d more %v %d kvs\nSQL store:   rev %d count %d more %v %d kvs", r, a.Rev, a.Count, a.More, len(a.Kvs), b.Rev, b.Count, b.More, len(b.Kvs))
		}
		for i := range a.Kvs {
			if !proto.Equal(a.Kvs[i], b.Kvs[i]) {
				t.Fatalf("%v: kv %d: index store %v, SQL store %v", r, i, a.Kvs[i], b.Kvs[i])
			}
		}
		if order != 0 || target != 0 || minMod != 0 || maxCreate != 0 || countOnly {
			return
		}
		at := rev
		if at <= 0 {
			at = head
		}
		var wantKVs []*mvccpb.KeyValue
		for _, kv := range states[at] {
			if mvcc.EtcdContains(key, end, kv.Key) {
				wantKVs = append(wantKVs, kv)
			}
		}
		slices.SortFunc(wantKVs, func(x, y *mvccpb.KeyValue) int { return bytes.Compare(x.Key, y.Key) })
		count, more := int64(len(wantKVs)), false
		if limit > 0 && int64(len(wantKVs)) > limit {
			wantKVs, more = wantKVs[:limit], true
		}
		if a.Rev != head || a.Count != count || a.More != more || len(a.Kvs) != len(wantKVs) {
			t.Fatalf("%v: rev %d count %d more %v, %d kvs; etcd: rev %d count %d more %v, %d kvs", r, a.Rev, a.Count, a.More, len(a.Kvs), head, count, more, len(wantKVs))
		}
		for i, kv := range wantKVs {
			got := a.Kvs[i]
			if !bytes.Equal(got.Key, kv.Key) || got.ModRevision != kv.ModRevision || got.CreateRevision != kv.CreateRevision || got.Version != kv.Version ||
				(!keysOnly && !bytes.Equal(got.Value, kv.Value)) || (keysOnly && len(got.Value) != 0) {
				t.Fatalf("%v: kv %d is %v, etcd: %v", r, i, got, kv)
			}
		}
	})
}

// opCount is how many operations and compares r holds, nested ones too.
func opCount(r *pb.TxnRequest) int {
	n := len(r.Compare)
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			n++
			if t := op.GetRequestTxn(); t != nil {
				n += opCount(t)
			}
		}
	}
	return n
}

// everything reads every key of s.
func everything(t *testing.T, s *mvcc.Store) *mvcc.RangeResult {
	t.Helper()
	res, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkExecuted holds the store after a transaction to what its executed
// branches did: each answer of the type of its operation, every key put at
// the new revision, every deleted range empty.
func checkExecuted(t *testing.T, s *mvcc.Store, r *pb.TxnRequest, resp *pb.TxnResponse, rev int64) {
	t.Helper()
	ops := r.Failure
	if resp.Succeeded {
		ops = r.Success
	}
	if len(resp.Responses) != len(ops) {
		t.Fatalf("%d answers to a branch of %d operations", len(resp.Responses), len(ops))
	}
	for i, op := range ops {
		ans := resp.Responses[i]
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			if ans.GetResponseRange() == nil {
				t.Fatalf("answer %d to a range: %v", i, ans)
			}
		case *pb.RequestOp_RequestPut:
			if ans.GetResponsePut() == nil {
				t.Fatalf("answer %d to a put: %v", i, ans)
			}
			got, err := s.Range(context.Background(), &pb.RangeRequest{Key: v.RequestPut.Key})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != rev || (!v.RequestPut.IgnoreValue && !bytes.Equal(got.Kvs[0].Value, v.RequestPut.Value)) {
				t.Fatalf("after put %v at revision %d the store has %v", v.RequestPut, rev, got.Kvs)
			}
		case *pb.RequestOp_RequestDeleteRange:
			if ans.GetResponseDeleteRange() == nil {
				t.Fatalf("answer %d to a delete: %v", i, ans)
			}
			d := v.RequestDeleteRange
			got, err := s.Range(context.Background(), &pb.RangeRequest{Key: d.Key, RangeEnd: d.RangeEnd, CountOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != 0 {
				t.Fatalf("after delete [%q, %q) the store has %d keys there", d.Key, d.RangeEnd, got.Count)
			}
		case *pb.RequestOp_RequestTxn:
			nested := ans.GetResponseTxn()
			if nested == nil {
				t.Fatalf("answer %d to a nested txn: %v", i, ans)
			}
			checkExecuted(t, s, v.RequestTxn, nested, rev)
		}
	}
}

// FuzzTxn sends any transaction (its protobuf encoding, fuzzed) through the
// static checks and the evaluation of a store that reads its live index and
// of one that reads SQL, applying the same sequence to both: they answer
// alike and hold the same keys after each; a refusal (CheckTxn's, or the
// evaluation's) writes nothing; an accepted transaction takes at most one
// revision, and leaves what its executed branches did.
func FuzzTxn(f *testing.F) {
	for _, r := range []*pb.TxnRequest{
		{Success: []*pb.RequestOp{putOp([]byte("a"), "1", 0), putOp([]byte("b"), "1", 1)}},
		{Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 2}}},
			Success: []*pb.RequestOp{putOp([]byte("a"), "2", 0)},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}}},
		{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, PrevKv: true}}}}},
		{Success: []*pb.RequestOp{putOp([]byte("x"), "1", 0), {}}},
		{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("b"), Target: pb.Compare_VALUE, TargetUnion: &pb.Compare_Value{Value: []byte("1")}}},
			Success: []*pb.RequestOp{putOp([]byte("n"), "then", 0)},
			Failure: []*pb.RequestOp{putOp([]byte("n"), "else", 0)}}}}}},
		{Success: []*pb.RequestOp{putOp([]byte("d"), "1", 0), {Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("c"), RangeEnd: []byte("e")}}}}},
		{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("a"), IgnoreValue: true, IgnoreLease: true}}}}},
		{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a"), Revision: 1000}}}}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s := openTwo(f)
	for _, st := range []*mvcc.Store{s.index, s.sql} {
		if _, err := st.Grant(context.Background(), mvcc.LeaseGrant{ID: 1, TTL: 3600}); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &pb.TxnRequest{}
		if proto.Unmarshal(b, r) != nil || proto.Size(r) > 64<<10 || opCount(r) > 300 {
			return
		}
		static := mvcc.CheckTxn(r, mvcc.MaxTxnOps)
		before := s.index.Rev()
		resp, err := s.txn(t, r)
		after := s.index.Rev()
		if a, b := everything(t, s.index), everything(t, s.sql); a.Rev != b.Rev || a.Count != b.Count || fmt.Sprint(a.Kvs) != fmt.Sprint(b.Kvs) {
			t.Fatalf("after %v the stores differ:\nindex store: %v\nSQL store:   %v", r, a.Kvs, b.Kvs)
		}
		switch {
		case static != nil && !errors.Is(err, static):
			t.Fatalf("%v: CheckTxn refuses it with %v, the store answers %v", r, static, err)
		case err != nil && !mvcc.Refused(err):
			t.Fatalf("%v: %v, not a refusal", r, err)
		case err != nil && after != before:
			t.Fatalf("%v was refused (%v) but the revision moved from %d to %d", r, err, before, after)
		case err != nil:
			return
		case after != before && after != before+1:
			t.Fatalf("%v moved the revision from %d to %d", r, before, after)
		case resp.Header.Revision != after:
			t.Fatalf("%v answered revision %d, the store is at %d", r, resp.Header.Revision, after)
		}
		checkExecuted(t, s.index, r, resp, after)
	})
}
