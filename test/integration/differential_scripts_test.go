package integration

import (
	"bytes"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// The scripts of TestDifferential: the edges a raw etcd client can reach.

func put(key, value string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value)}}}
}

func get(key, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}}
}

func del(key, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), RangeEnd: []byte(end), PrevKv: true}}}
}

func txnOp(t *pb.TxnRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}
}

// puts is n puts of distinct keys under prefix.
func puts(prefix string, n int) []*pb.RequestOp {
	ops := make([]*pb.RequestOp, n)
	for i := range ops {
		ops[i] = put(fmt.Sprintf("%s%03d", prefix, i), "v")
	}
	return ops
}

func cmpMod(key string, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

func cmpValue(key, end, value string, r pb.Compare_CompareResult) *pb.Compare {
	return &pb.Compare{Key: []byte(key), RangeEnd: []byte(end), Target: pb.Compare_VALUE, Result: r, TargetUnion: &pb.Compare_Value{Value: []byte(value)}}
}

// everything reads every key, to show what a step left behind.
func everything(s *side, step string) {
	s.Range(step+": every key", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
}

// putOfSize is a put of key whose encoded request is exactly size bytes.
func putOfSize(key string, size int) *pb.PutRequest {
	p := &pb.PutRequest{Key: []byte(key)}
	p.Value = bytes.Repeat([]byte("x"), max(0, size-proto.Size(p)-4))
	for proto.Size(p) < size {
		p.Value = append(p.Value, 'x')
	}
	for proto.Size(p) > size {
		p.Value = p.Value[:len(p.Value)-1]
	}
	return p
}

func watchCreate(r *pb.WatchCreateRequest) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: r}}
}

func watchCancel(id int64) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
}

var differentialScripts = []script{
	{name: "keys", run: func(s *side) {
		s.Put("empty key", &pb.PutRequest{Value: []byte("v")})
		for i, k := range []string{"\x00", "\xff", "\xff\xfe\xfd", "a\x00b", "é", "\xc3\x28", "a"} {
			s.Put(fmt.Sprintf("binary key %d %q", i, k), &pb.PutRequest{Key: []byte(k), Value: []byte{0, 0xff, byte(i)}, PrevKv: true})
		}
		s.Put("overwrite with prev_kv", &pb.PutRequest{Key: []byte("a\x00b"), Value: []byte("w"), PrevKv: true})
		everything(s, "after puts")
		s.Range("prefix \\xff", &pb.RangeRequest{Key: []byte{0xff}, RangeEnd: []byte{0}})
		s.Range("prefix a", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b")})
		s.Range("key \\x00 alone", &pb.RangeRequest{Key: []byte{0}})
		s.Range("empty key", &pb.RangeRequest{RangeEnd: []byte{0}})
		s.Range("empty key, no end", &pb.RangeRequest{})
		s.Range("range_end before key", &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("a")})
		s.Range("range_end equal to key", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("a")})
		s.Range("range_end before key, count only", &pb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("a"), CountOnly: true})
		s.Delete("empty key", &pb.DeleteRangeRequest{})
		s.Delete("range_end before key", &pb.DeleteRangeRequest{Key: []byte("\xff"), RangeEnd: []byte("a"), PrevKv: true})
		s.Delete("absent key", &pb.DeleteRangeRequest{Key: []byte("nope"), PrevKv: true})
		s.Delete("binary range", &pb.DeleteRangeRequest{Key: []byte("\xff"), RangeEnd: []byte("\xff\xff"), PrevKv: true})
		everything(s, "after deletes")
	}},
	{name: "range options", run: func(s *side) {
		for i := range 5 {
			s.Put(fmt.Sprintf("put %d", i), &pb.PutRequest{Key: []byte(fmt.Sprintf("r/%d", i%3)), Value: []byte(fmt.Sprint(i))})
		}
		r := func(step string, f func(*pb.RangeRequest)) {
			req := &pb.RangeRequest{Key: []byte("r/"), RangeEnd: []byte("r0")}
			f(req)
			s.Range(step, req)
		}
		r("limit -1", func(q *pb.RangeRequest) { q.Limit = -1 })
		r("limit 0", func(q *pb.RangeRequest) { q.Limit = 0 })
		r("limit 1", func(q *pb.RangeRequest) { q.Limit = 1 })
		r("limit 3", func(q *pb.RangeRequest) { q.Limit = 3 })
		r("limit 1, count only", func(q *pb.RangeRequest) { q.Limit = 1; q.CountOnly = true })
		r("limit 1, keys only", func(q *pb.RangeRequest) { q.Limit = 1; q.KeysOnly = true })
		r("revision -1", func(q *pb.RangeRequest) { q.Revision = -1 })
		r("revision 0", func(q *pb.RangeRequest) { q.Revision = 0 })
		r("revision 1", func(q *pb.RangeRequest) { q.Revision = 1 })
		r("revision 3", func(q *pb.RangeRequest) { q.Revision = 3 })
		r("revision 6 (current)", func(q *pb.RangeRequest) { q.Revision = 6 })
		r("revision 7 (future)", func(q *pb.RangeRequest) { q.Revision = 7 })
		r("sort order 99", func(q *pb.RangeRequest) { q.SortOrder = 99 })
		r("sort target 99", func(q *pb.RangeRequest) { q.SortTarget = 99 })
		r("sort order -1", func(q *pb.RangeRequest) { q.SortOrder = -1 })
		r("sort by value descending, limit 2", func(q *pb.RangeRequest) {
			q.SortOrder, q.SortTarget, q.Limit = pb.RangeRequest_DESCEND, pb.RangeRequest_VALUE, 2
		})
		r("sort target without order, limit 1", func(q *pb.RangeRequest) { q.SortTarget, q.Limit = pb.RangeRequest_MOD, 1 })
		r("negative revision filters", func(q *pb.RangeRequest) {
			q.MinModRevision, q.MaxModRevision, q.MinCreateRevision, q.MaxCreateRevision = -5, -1, -3, -2
		})
		r("min_mod_revision 5", func(q *pb.RangeRequest) { q.MinModRevision = 5 })
		r("max_create_revision 3, limit 1", func(q *pb.RangeRequest) { q.MaxCreateRevision, q.Limit = 3, 1 })
		r("serializable", func(q *pb.RangeRequest) { q.Serializable = true })
		s.Compact("compact at 3", 3)
		r("revision 2, compacted", func(q *pb.RangeRequest) { q.Revision = 2 })
		r("revision 3, at the floor", func(q *pb.RangeRequest) { q.Revision = 3 })
	}},
	{name: "compaction", run: func(s *side) {
		for i := range 4 {
			s.Put(fmt.Sprintf("put %d", i), &pb.PutRequest{Key: []byte("c"), Value: []byte(fmt.Sprint(i))})
		}
		s.Compact("compact -1", -1)
		s.Compact("compact 0", 0)
		s.Compact("compact future", 9)
		s.Compact("compact 3", 3)
		s.Compact("compact 3 again", 3)
		s.Compact("compact 2", 2)
		s.Compact("compact current", 5)
		s.Range("after compacting to current", &pb.RangeRequest{Key: []byte("c"), Revision: 4})
		s.Range("at current", &pb.RangeRequest{Key: []byte("c"), Revision: 5})
	}},
	{name: "put options", run: func(s *side) {
		s.Grant("grant 7", &pb.LeaseGrantRequest{ID: 7, TTL: 600})
		s.Put("ignore_value, absent key", &pb.PutRequest{Key: []byte("p"), IgnoreValue: true})
		s.Put("ignore_lease, absent key", &pb.PutRequest{Key: []byte("p"), Value: []byte("v"), IgnoreLease: true})
		s.Put("plain", &pb.PutRequest{Key: []byte("p"), Value: []byte("v"), Lease: 7})
		s.Put("ignore_value with a value", &pb.PutRequest{Key: []byte("p"), Value: []byte("x"), IgnoreValue: true})
		s.Put("ignore_lease with a lease", &pb.PutRequest{Key: []byte("p"), Lease: 7, IgnoreLease: true})
		s.Put("ignore_value", &pb.PutRequest{Key: []byte("p"), IgnoreValue: true, PrevKv: true})
		s.Put("ignore_lease", &pb.PutRequest{Key: []byte("p"), Value: []byte("w"), IgnoreLease: true, PrevKv: true})
		s.Put("unknown lease", &pb.PutRequest{Key: []byte("p"), Value: []byte("u"), Lease: 99})
		s.Put("negative lease", &pb.PutRequest{Key: []byte("p"), Value: []byte("u"), Lease: -1})
		s.Put("empty value", &pb.PutRequest{Key: []byte("p"), PrevKv: true})
		everything(s, "after puts")
	}},
	{name: "request size", run: func(s *side) {
		// etcd's bound is on the request as its raft log entry, a few bytes
		// more than the request itself. How many more depends on the
		// server's member ID (the entry's request ID holds its low 16 bits,
		// a varint of 7 to 10 bytes), which differs between the two
		// servers: a put of the limit -18 to -15 bytes is refused by one
		// and not the other as their IDs fall, so the sizes tried stay
		// outside that band.
		const limit = 3 * 1024 * 1024 / 2
		for _, d := range []int{-64, -32, -20, -19, -14, -12, 0, 1, 64} {
			p := putOfSize("big", limit+d)
			s.Put(fmt.Sprintf("put of the limit %+d bytes", d), p)
		}
		for _, d := range []int{-64, -16, 0, 1} {
			t := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: putOfSize("big", limit+d-4)}}}}
			s.Txn(fmt.Sprintf("txn of the limit %+d bytes", d), t)
		}
		// The other refusals come first.
		over := putOfSize("", limit+64)
		s.Put("empty key over the limit", over)
		s.Txn("too many ops over the limit", &pb.TxnRequest{Success: append(puts("t/", 128), &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: putOfSize("x", limit)}})})
		s.Txn("duplicate keys over the limit", &pb.TxnRequest{Success: []*pb.RequestOp{put("big", "v"), {Request: &pb.RequestOp_RequestPut{RequestPut: putOfSize("big", limit)}}}})
		s.Delete("delete of a key over the limit", &pb.DeleteRangeRequest{Key: bytes.Repeat([]byte("k"), limit)})
		// Reads are not bounded by it.
		s.Range("range of a key over the limit", &pb.RangeRequest{Key: bytes.Repeat([]byte("k"), limit+1000)})
		s.Txn("read-only txn over the limit", &pb.TxnRequest{Success: []*pb.RequestOp{get(string(bytes.Repeat([]byte("k"), limit+1000)), "")}})
		s.Range("every key, keys only", &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, KeysOnly: true})
	}},
	{name: "txn", run: func(s *side) {
		s.Put("seed", &pb.PutRequest{Key: []byte("t/a"), Value: []byte("0")})
		s.Txn("128 puts", &pb.TxnRequest{Success: puts("t/many/", 128)})
		s.Txn("129 puts", &pb.TxnRequest{Success: puts("t/over/", 129)})
		s.Txn("129 compares", &pb.TxnRequest{Compare: func() []*pb.Compare {
			c := make([]*pb.Compare, 129)
			for i := range c {
				c[i] = cmpMod("t/a", 2)
			}
			return c
		}()})
		// A nested transaction has what its parent's longest list leaves.
		s.Txn("100 puts and a nested txn of 100", &pb.TxnRequest{Success: append(puts("t/n1/", 100), txnOp(&pb.TxnRequest{Success: puts("t/n2/", 100)}))})
		s.Txn("64 puts and a nested txn of 64", &pb.TxnRequest{Success: append(puts("t/n3/", 63), txnOp(&pb.TxnRequest{Success: puts("t/n4/", 64)}))})
		s.Txn("64 puts and a nested txn of 65", &pb.TxnRequest{Success: append(puts("t/n5/", 63), txnOp(&pb.TxnRequest{Success: puts("t/n6/", 65)}))})
		s.Txn("nested three deep", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/d0", "v"), txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: puts("t/d3/", 126)})}})}})
		s.Txn("an empty RequestOp", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/e1", "v"), {}, put("t/e2", "v")}})
		s.Txn("an empty RequestOp in failure", &pb.TxnRequest{Compare: []*pb.Compare{cmpMod("t/a", 99)}, Failure: []*pb.RequestOp{{}}})
		s.Txn("an empty nested txn", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{})}})
		s.Txn("put twice", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/x", "1"), put("t/x", "2")}})
		s.Txn("put inside a deleted range", &pb.TxnRequest{Success: []*pb.RequestOp{del("t/", "t0"), put("t/x", "2")}})
		s.Txn("put then delete it", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/x", "2"), del("t/x", "")}})
		s.Txn("overlapping deletes", &pb.TxnRequest{Success: []*pb.RequestOp{del("t/n3/", "t/n3/050"), del("t/n3/040", "t/n3/060")}})
		s.Txn("put in parent and nested", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/y", "1"), txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{put("t/y", "2")}})}})
		s.Txn("put in both nested branches", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{Compare: []*pb.Compare{cmpMod("t/a", 2)}, Success: []*pb.RequestOp{put("t/z", "then")}, Failure: []*pb.RequestOp{put("t/z", "else")}})}})
		s.Txn("put in two nested txns", &pb.TxnRequest{Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{put("t/w", "1")}}), txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{put("t/w", "2")}})}})
		s.Txn("nested delete and parent put", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/v", "1"), txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{del("t/v", "")}})}})
		s.Txn("compare with an empty key", &pb.TxnRequest{Compare: []*pb.Compare{cmpMod("", 0)}})
		s.Txn("compare a range, all equal", &pb.TxnRequest{Compare: []*pb.Compare{cmpValue("t/many/", "t/many0", "v", pb.Compare_EQUAL)}, Success: []*pb.RequestOp{get("t/a", "")}})
		s.Txn("compare a range, one differs", &pb.TxnRequest{Compare: []*pb.Compare{cmpValue("t/", "t0", "v", pb.Compare_EQUAL)}, Failure: []*pb.RequestOp{get("t/a", "")}})
		s.Txn("compare an absent key's value", &pb.TxnRequest{Compare: []*pb.Compare{cmpValue("t/absent", "", "", pb.Compare_EQUAL)}})
		s.Txn("compare an absent key's value, not equal", &pb.TxnRequest{Compare: []*pb.Compare{cmpValue("t/absent", "", "x", pb.Compare_NOT_EQUAL)}})
		s.Txn("compare result 99", &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("t/a"), Result: 99, Target: pb.Compare_MOD}}})
		s.Txn("compare target 99", &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("t/a"), Target: 99}}})
		s.Txn("compare mod with a value target union", &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("t/a"), Target: pb.Compare_MOD, TargetUnion: &pb.Compare_Value{Value: []byte("2")}}}})
		s.Txn("range with a bad sort", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("t/a"), SortOrder: 7}}}}})
		s.Txn("range at a future revision", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/f", "1"), {Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("t/a"), Revision: 1000}}}}})
		s.Txn("delete with an empty key", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/g", "1"), del("", "")}})
		s.Txn("put with an unknown lease", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/h", "1"), {Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t/i"), Lease: 5}}}}})
		s.Txn("ignore_value of a key deleted before", &pb.TxnRequest{Success: []*pb.RequestOp{del("t/a", ""), {Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t/a"), IgnoreValue: true}}}}})
		s.Txn("reads see earlier writes", &pb.TxnRequest{Success: []*pb.RequestOp{put("t/r", "1"), get("t/r", ""), del("t/many/", "t/many/010"), get("t/many/", "t/many/020")}})
		s.Range("count after all that", &pb.RangeRequest{Key: []byte("t/"), RangeEnd: []byte("t0"), CountOnly: true})
		s.Range("revision after all that", &pb.RangeRequest{Key: []byte("t/a")})
	}},
	{name: "leases", run: func(s *side) {
		s.Grant("ttl 0", &pb.LeaseGrantRequest{ID: 1, TTL: 0})
		s.Grant("ttl -5", &pb.LeaseGrantRequest{ID: 2, TTL: -5})
		s.Grant("ttl too large", &pb.LeaseGrantRequest{ID: 3, TTL: 9_000_000_001})
		s.Grant("id -1", &pb.LeaseGrantRequest{ID: -1, TTL: 60})
		s.Grant("ttl 600", &pb.LeaseGrantRequest{ID: 10, TTL: 600})
		s.Grant("same id", &pb.LeaseGrantRequest{ID: 10, TTL: 60})
		s.Put("on lease 10", &pb.PutRequest{Key: []byte("l/a"), Value: []byte("v"), Lease: 10})
		s.Put("on lease 10 too", &pb.PutRequest{Key: []byte("l/b"), Value: []byte("v"), Lease: 10})
		s.TimeToLive("lease 10", 10)
		s.TimeToLive("unknown lease", 11)
		s.KeepAliveOnce("keepalive unknown", 11)
		s.Revoke("revoke unknown", 11)
		s.Revoke("revoke 10", 10)
		s.Revoke("revoke 10 again", 10)
		s.TimeToLive("revoked lease", 10)
		everything(s, "after revoke")
	}},
	{name: "watch", run: func(s *side) {
		s.Put("seed", &pb.PutRequest{Key: []byte("k"), Value: []byte("0")}) // 2
		s.Put("seed", &pb.PutRequest{Key: []byte("k"), Value: []byte("1")}) // 3
		s.Watch("negative start revision", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: -1}))
		s.Watch("range_end before key", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("a")}))
		s.Watch("range_end equal to key", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), RangeEnd: []byte("k")}))
		s.Watch("first watch takes ID 0", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), PrevKv: true}))
		s.Watch("explicit ID 0 is automatic", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 0}))
		s.Watch("duplicate explicit ID", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("x"), WatchId: 1}))
		s.Watch("explicit ID 7", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 7, StartRevision: 2}))
		s.Watch("empty key from key", "a", watchCreate(&pb.WatchCreateRequest{RangeEnd: []byte{0}, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}}))
		s.Put("write", &pb.PutRequest{Key: []byte("k"), Value: []byte("2")}) // 4
		s.Drain("the watches that live hear it", "a")
		s.Delete("delete", &pb.DeleteRangeRequest{Key: []byte("k")}) // 5
		s.Drain("all but NODELETE hear it", "a")
		s.Watch("cancel 1", "a", watchCancel(1))
		s.Watch("cancel 1 again", "a", watchCancel(1))
		s.Watch("cancel unknown", "a", watchCancel(42))
		s.Watch("reuse ID 1", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), WatchId: 1}))
		s.Watch("next automatic ID", "a", watchCreate(&pb.WatchCreateRequest{Key: []byte("k")}))
		s.Watch("progress request", "a", &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		s.Watch("progress request with no watches", "b", &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		s.Watch("future start revision", "b", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 7}))
		s.Put("write", &pb.PutRequest{Key: []byte("k"), Value: []byte("3")}) // 6
		s.Put("write", &pb.PutRequest{Key: []byte("k"), Value: []byte("4")}) // 7
		s.Drain("the future watch starts at 7", "b")
		s.Compact("compact", 5)
		s.Watch("below the floor", "b", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 4}))
		s.Watch("at the floor", "b", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 5, PrevKv: true}))
		s.Watch("empty request", "b", &pb.WatchRequest{})
		s.Watch("after all that", "b", watchCreate(&pb.WatchCreateRequest{Key: []byte("k"), StartRevision: 6}))
	}},
}
