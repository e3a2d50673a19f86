package mvcc

import (
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestRangePlan(t *testing.T) {
	type plan struct {
		order       pb.RangeRequest_SortOrder
		filtered    bool
		limit       int64
		sortByValue bool
		keysOnly    bool
	}
	for _, tc := range []struct {
		name string
		r    *pb.RangeRequest
		want plan
	}{
		{name: "plain", r: &pb.RangeRequest{}, want: plan{}},
		{name: "limit goes to SQL", r: &pb.RangeRequest{Limit: 5}, want: plan{limit: 5}},
		{name: "negative limit is none", r: &pb.RangeRequest{Limit: -1}, want: plan{}},
		{name: "keys_only", r: &pb.RangeRequest{KeysOnly: true, Limit: 5}, want: plan{limit: 5, keysOnly: true}},
		// Rows come in key order: ascending by key needs no sort.
		{name: "key ascending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_KEY, SortOrder: pb.RangeRequest_ASCEND, Limit: 5}, want: plan{limit: 5}},
		{name: "key descending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_KEY, SortOrder: pb.RangeRequest_DESCEND, Limit: 5}, want: plan{order: pb.RangeRequest_DESCEND}},
		// etcd sorts ascending when a target other than the key has no order.
		{name: "mod without order", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD}, want: plan{order: pb.RangeRequest_ASCEND}},
		// ...but with a limit, as etcd does, only the first limit+1 keys.
		{name: "mod without order limited", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, Limit: 5}, want: plan{order: pb.RangeRequest_ASCEND, limit: 6}},
		{name: "value without order limited", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, Limit: 1, KeysOnly: true}, want: plan{order: pb.RangeRequest_ASCEND, limit: 2, sortByValue: true}},
		{name: "mod without order filtered", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, Limit: 5, MaxModRevision: 9}, want: plan{order: pb.RangeRequest_ASCEND, filtered: true}},
		{name: "mod ascending limited", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_ASCEND, Limit: 5}, want: plan{order: pb.RangeRequest_ASCEND}},
		{name: "version descending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_VERSION, SortOrder: pb.RangeRequest_DESCEND, Limit: 5}, want: plan{order: pb.RangeRequest_DESCEND}},
		{name: "create ascending keys_only", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_ASCEND, KeysOnly: true}, want: plan{order: pb.RangeRequest_ASCEND, keysOnly: true}},
		// Sorting by value needs the values keys_only leaves out.
		{name: "value keys_only", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND, KeysOnly: true}, want: plan{order: pb.RangeRequest_DESCEND, sortByValue: true}},
		{name: "value without order keys_only", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, KeysOnly: true}, want: plan{order: pb.RangeRequest_ASCEND, sortByValue: true}},
		// Filters need every row before the limit applies.
		{name: "min mod", r: &pb.RangeRequest{MinModRevision: 3, Limit: 5}, want: plan{filtered: true}},
		{name: "max mod", r: &pb.RangeRequest{MaxModRevision: 3, Limit: 5}, want: plan{filtered: true}},
		{name: "min create", r: &pb.RangeRequest{MinCreateRevision: 3, Limit: 5}, want: plan{filtered: true}},
		{name: "max create", r: &pb.RangeRequest{MaxCreateRevision: 3, Limit: 5}, want: plan{filtered: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got plan
			got.order, got.filtered, got.limit, got.sortByValue, got.keysOnly = rangePlan(tc.r)
			if got != tc.want {
				t.Fatalf("rangePlan = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func kvAt(key string, create, mod, version int64, value string) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), CreateRevision: create, ModRevision: mod, Version: version, Value: []byte(value)}
}

func keysOf(kvs []*mvccpb.KeyValue) string {
	ks := make([]string, len(kvs))
	for i, kv := range kvs {
		ks[i] = string(kv.Key)
	}
	return strings.Join(ks, " ")
}

func TestFinishRange(t *testing.T) {
	// Created in order, then b, d and a changed again; values run the
	// other way from keys.
	rows := func() []*mvccpb.KeyValue {
		return []*mvccpb.KeyValue{
			kvAt("a", 2, 9, 3, "w"), kvAt("b", 3, 7, 2, "x"), kvAt("c", 4, 4, 1, "y"), kvAt("d", 5, 8, 2, "z"), kvAt("e", 6, 6, 1, "v"),
		}
	}
	for _, tc := range []struct {
		name      string
		r         *pb.RangeRequest
		kvs       []*mvccpb.KeyValue // as read
		count     int64
		want      string
		more      bool
		hideValue bool
	}{
		{name: "all", r: &pb.RangeRequest{}, kvs: rows(), count: 5, want: "a b c d e"},
		{name: "limit above count", r: &pb.RangeRequest{Limit: 10}, kvs: rows(), count: 5, want: "a b c d e"},
		{name: "limit equal to count", r: &pb.RangeRequest{Limit: 5}, kvs: rows(), count: 5, want: "a b c d e"},
		{name: "limit cuts the rows read", r: &pb.RangeRequest{Limit: 2}, kvs: rows(), count: 5, want: "a b", more: true},
		// SQL's LIMIT already cut the rows: the count tells there are more.
		{name: "limited read", r: &pb.RangeRequest{Limit: 2}, kvs: rows()[:2], count: 5, want: "a b", more: true},
		{name: "mod ascending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_ASCEND}, kvs: rows(), count: 5, want: "c e b d a"},
		// A target without an order: the first limit+1 keys read, sorted.
		{name: "mod without order limited", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, Limit: 2}, kvs: rows()[:3], count: 5, want: "c b", more: true},
		{name: "mod without order, limit+1 is all", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, Limit: 4}, kvs: rows(), count: 5, want: "c e b d", more: true},
		{name: "mod without order, limit above count", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, Limit: 5}, kvs: rows(), count: 5, want: "c e b d a"},
		{name: "mod descending limited", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_DESCEND, Limit: 2}, kvs: rows(), count: 5, want: "a d", more: true},
		{name: "create descending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_DESCEND}, kvs: rows(), count: 5, want: "e d c b a"},
		{name: "key descending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_KEY, SortOrder: pb.RangeRequest_DESCEND, Limit: 3}, kvs: rows(), count: 5, want: "e d c", more: true},
		// Equal versions keep their key order.
		{name: "version ascending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_VERSION, SortOrder: pb.RangeRequest_ASCEND}, kvs: rows(), count: 5, want: "c e b d a"},
		{name: "value ascending", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_ASCEND}, kvs: rows(), count: 5, want: "e a b c d"},
		{name: "value descending keys_only", r: &pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND, KeysOnly: true}, kvs: rows(), count: 5, want: "d c b a e", hideValue: true},
		{name: "min mod", r: &pb.RangeRequest{MinModRevision: 7}, kvs: rows(), count: 5, want: "a b d"},
		{name: "max mod", r: &pb.RangeRequest{MaxModRevision: 7}, kvs: rows(), count: 5, want: "b c e"},
		{name: "min create", r: &pb.RangeRequest{MinCreateRevision: 4}, kvs: rows(), count: 5, want: "c d e"},
		{name: "max create", r: &pb.RangeRequest{MaxCreateRevision: 4}, kvs: rows(), count: 5, want: "a b c"},
		{name: "mod window", r: &pb.RangeRequest{MinModRevision: 6, MaxModRevision: 8}, kvs: rows(), count: 5, want: "b d e"},
		// Count stays the range's; More counts only what the filters kept.
		{name: "filtered within limit", r: &pb.RangeRequest{MinModRevision: 7, Limit: 3}, kvs: rows(), count: 5, want: "a b d"},
		{name: "filtered over limit", r: &pb.RangeRequest{MinModRevision: 7, Limit: 2}, kvs: rows(), count: 5, want: "a b", more: true},
		{name: "filtered and sorted", r: &pb.RangeRequest{MinModRevision: 7, SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_DESCEND, Limit: 2}, kvs: rows(), count: 5, want: "a d", more: true},
		{name: "nothing", r: &pb.RangeRequest{Limit: 2}, kvs: nil, count: 0, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			order, filtered, _, sortByValue, _ := rangePlan(tc.r)
			res := finishRange(&RangeResult{Rev: 10, Count: tc.count}, tc.kvs, tc.r, order, sortByValue, filtered)
			if got := keysOf(res.Kvs); got != tc.want || res.More != tc.more {
				t.Fatalf("got %q more %v, want %q more %v", got, res.More, tc.want, tc.more)
			}
			if res.Count != tc.count || res.Rev != 10 {
				t.Fatalf("count %d rev %d, want %d 10", res.Count, res.Rev, tc.count)
			}
			for _, kv := range res.Kvs {
				if (kv.Value == nil) != tc.hideValue {
					t.Fatalf("%s: value %q, hidden %v", kv.Key, kv.Value, tc.hideValue)
				}
			}
		})
	}
}
