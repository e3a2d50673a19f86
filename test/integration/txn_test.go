package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestTxnCompares(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		l, err := cli.Grant(ctx, 600)
		must(t, err)
		lid := int64(l.ID)
		_, err = cli.Put(ctx, "k", "v5") // 2
		must(t, err)
		_, err = cli.Put(ctx, "k", "v5") // 3
		must(t, err)
		_, err = cli.Put(ctx, "k", "v5", clientv3.WithLease(l.ID)) // 4: version 3, create 2, mod 4
		must(t, err)
		_, err = cli.Put(ctx, "p/a", "x") // 5
		must(t, err)
		_, err = cli.Put(ctx, "p/b", "y") // 6
		must(t, err)
		_, err = cli.Put(ctx, "p/b", "y") // 7: p/b version 2
		must(t, err)

		C := clientv3.Compare
		V, Ver, Cr, Mod, Le := clientv3.Value, clientv3.Version, clientv3.CreateRevision, clientv3.ModRevision, clientv3.LeaseValue
		cases := []struct {
			name string
			cmp  clientv3.Cmp
			want bool
		}{
			{"value = v5", C(V("k"), "=", "v5"), true},
			{"value = v4", C(V("k"), "=", "v4"), false},
			{"value != v5", C(V("k"), "!=", "v5"), false},
			{"value != zz", C(V("k"), "!=", "zz"), true},
			{"value < v6", C(V("k"), "<", "v6"), true},
			{"value < v5", C(V("k"), "<", "v5"), false},
			{"value < v55", C(V("k"), "<", "v55"), true},
			{"value > v4", C(V("k"), ">", "v4"), true},
			{"value > v5", C(V("k"), ">", "v5"), false},
			{"value > v", C(V("k"), ">", "v"), true},
			{"version = 3", C(Ver("k"), "=", 3), true},
			{"version = 0", C(Ver("k"), "=", 0), false},
			{"version != 3", C(Ver("k"), "!=", 3), false},
			{"version != 2", C(Ver("k"), "!=", 2), true},
			{"version < 4", C(Ver("k"), "<", 4), true},
			{"version < 3", C(Ver("k"), "<", 3), false},
			{"version > 2", C(Ver("k"), ">", 2), true},
			{"version > 3", C(Ver("k"), ">", 3), false},
			{"create = 2", C(Cr("k"), "=", 2), true},
			{"create != 2", C(Cr("k"), "!=", 2), false},
			{"create < 3", C(Cr("k"), "<", 3), true},
			{"create < 2", C(Cr("k"), "<", 2), false},
			{"create > 1", C(Cr("k"), ">", 1), true},
			{"create > 2", C(Cr("k"), ">", 2), false},
			{"mod = 4", C(Mod("k"), "=", 4), true},
			{"mod = 3", C(Mod("k"), "=", 3), false},
			{"mod != 3", C(Mod("k"), "!=", 3), true},
			{"mod != 4", C(Mod("k"), "!=", 4), false},
			{"mod < 5", C(Mod("k"), "<", 5), true},
			{"mod < 4", C(Mod("k"), "<", 4), false},
			{"mod > 3", C(Mod("k"), ">", 3), true},
			{"mod > 4", C(Mod("k"), ">", 4), false},
			{"lease = L", C(Le("k"), "=", lid), true},
			{"lease = 0", C(Le("k"), "=", 0), false},
			{"lease != L", C(Le("k"), "!=", lid), false},
			{"lease != 0", C(Le("k"), "!=", 0), true},
			{"lease < L+1", C(Le("k"), "<", lid+1), true},
			{"lease < L", C(Le("k"), "<", lid), false},
			{"lease > 0", C(Le("k"), ">", 0), true},
			{"lease > L", C(Le("k"), ">", lid), false},
			// A missing key compares as a zero KeyValue, except on its value,
			// which always fails.
			{"missing version = 0", C(Ver("missing"), "=", 0), true},
			{"missing create = 0", C(Cr("missing"), "=", 0), true},
			{"missing mod = 0", C(Mod("missing"), "=", 0), true},
			{"missing mod < 1", C(Mod("missing"), "<", 1), true},
			{"missing lease = 0", C(Le("missing"), "=", 0), true},
			{"missing version > 0", C(Ver("missing"), ">", 0), false},
			{"missing value = empty", C(V("missing"), "=", ""), false},
			{"missing value != x", C(V("missing"), "!=", "x"), false},
			{"missing value > empty", C(V("missing"), ">", ""), false},
			// A compare over a range holds only if it holds for every key.
			{"prefix version > 0", C(Ver("p/"), ">", 0).WithPrefix(), true},
			{"prefix version = 1", C(Ver("p/"), "=", 1).WithPrefix(), false},
			{"prefix version < 3", C(Ver("p/"), "<", 3).WithPrefix(), true},
			{"prefix value > w", C(V("p/"), ">", "w").WithPrefix(), true},
			{"prefix value = x", C(V("p/"), "=", "x").WithPrefix(), false},
			{"range [p/a,p/b) version = 1", C(Ver("p/a"), "=", 1).WithRange("p/b"), true},
			{"empty prefix version = 0", C(Ver("q/"), "=", 0).WithPrefix(), true},
			{"empty prefix value = empty", C(V("q/"), "=", "").WithPrefix(), false},
		}
		for _, tc := range cases {
			tr, err := cli.Txn(ctx).If(tc.cmp).Then(clientv3.OpGet("k")).Else(clientv3.OpGet("p/a")).Commit()
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if tr.Succeeded != tc.want {
				t.Errorf("%s: succeeded = %v, want %v", tc.name, tr.Succeeded, tc.want)
				continue
			}
			if tr.Header.Revision != 7 || len(tr.Responses) != 1 {
				t.Fatalf("%s: rev %d responses %d", tc.name, tr.Header.Revision, len(tr.Responses))
			}
			wantKey := map[bool]string{true: "k", false: "p/a"}[tc.want]
			if kvs := tr.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Key) != wantKey {
				t.Fatalf("%s: branch read %q, want %q", tc.name, keysOf(kvs), wantKey)
			}
		}

		// Several compares: all must hold.
		tr, err := cli.Txn(ctx).If(C(V("k"), "=", "v5"), C(Ver("k"), "=", 3), C(Mod("k"), "=", 4)).Commit()
		must(t, err)
		if !tr.Succeeded {
			t.Fatalf("all-true compares failed")
		}
		tr, err = cli.Txn(ctx).If(C(V("k"), "=", "v5"), C(Ver("k"), "=", 2)).Commit()
		must(t, err)
		if tr.Succeeded {
			t.Fatalf("one false compare succeeded")
		}
		// No compare at all succeeds.
		tr, err = cli.Txn(ctx).Then(clientv3.OpGet("k")).Commit()
		must(t, err)
		if !tr.Succeeded {
			t.Fatalf("empty compare list failed")
		}
		wantRev(t, cli, 7)
	})
}

func TestTxnBranchesAndRevisions(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		_, err := cli.Put(ctx, "k", "v") // 2
		must(t, err)
		_, err = cli.Put(ctx, "c", "old") // 3
		must(t, err)

		// Success branch with many writes: exactly one revision.
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("k"), "=", "v")).
			Then(clientv3.OpPut("a", "1"), clientv3.OpGet("k"), clientv3.OpPut("b", "2"), clientv3.OpPut("c", "new", clientv3.WithPrevKV()), clientv3.OpDelete("k", clientv3.WithPrevKV())).
			Else(clientv3.OpGet("k")).Commit()
		must(t, err)
		if !tr.Succeeded || tr.Header.Revision != 4 || len(tr.Responses) != 5 {
			t.Fatalf("success txn: succeeded %v rev %d responses %d", tr.Succeeded, tr.Header.Revision, len(tr.Responses))
		}
		if tr.Responses[0].GetResponsePut() == nil || tr.Responses[1].GetResponseRange() == nil ||
			tr.Responses[2].GetResponsePut() == nil || tr.Responses[3].GetResponsePut() == nil || tr.Responses[4].GetResponseDeleteRange() == nil {
			t.Fatalf("success txn: wrong response kinds %v", tr.Responses)
		}
		wantKV(t, tr.Responses[1].GetResponseRange().Kvs[0], "k", "v", 2, 2, 1, 0)
		wantKV(t, tr.Responses[3].GetResponsePut().PrevKv, "c", "old", 3, 3, 1, 0)
		del := tr.Responses[4].GetResponseDeleteRange()
		if del.Deleted != 1 || len(del.PrevKvs) != 1 {
			t.Fatalf("delete in txn: deleted %d", del.Deleted)
		}
		wantKV(t, del.PrevKvs[0], "k", "v", 2, 2, 1, 0)
		g, err := cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		if g.Header.Revision != 4 || g.Count != 3 {
			t.Fatalf("after txn: rev %d count %d", g.Header.Revision, g.Count)
		}
		wantKV(t, g.Kvs[0], "a", "1", 4, 4, 1, 0)
		wantKV(t, g.Kvs[1], "b", "2", 4, 4, 1, 0)
		wantKV(t, g.Kvs[2], "c", "new", 3, 4, 2, 0)

		// All writes of the txn are events of one revision, in op order.
		wch := cli.Watch(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(4))
		evs := collectEvents(t, wch, 4, 10*time.Second)
		for i, want := range []string{"PUT a", "PUT b", "PUT c", "DELETE k"} {
			if got := fmt.Sprintf("%s %s", evs[i].Type, evs[i].Kv.Key); got != want || evs[i].Kv.ModRevision != 4 {
				t.Fatalf("event %d = %s, want %s at 4", i, evString(evs[i]), want)
			}
		}

		// Failed compare, reads only: no revision.
		tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "nope")).
			Then(clientv3.OpPut("x", "1")).
			Else(clientv3.OpGet("a"), clientv3.OpGet("missing")).Commit()
		must(t, err)
		if tr.Succeeded || tr.Header.Revision != 4 || len(tr.Responses) != 2 {
			t.Fatalf("failed txn: succeeded %v rev %d responses %d", tr.Succeeded, tr.Header.Revision, len(tr.Responses))
		}
		wantKV(t, tr.Responses[0].GetResponseRange().Kvs[0], "a", "1", 4, 4, 1, 0)
		if n := tr.Responses[1].GetResponseRange().Count; n != 0 {
			t.Fatalf("else get missing: count %d", n)
		}
		// Successful compare, reads only: no revision.
		tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "1")).Then(clientv3.OpGet("a")).Commit()
		must(t, err)
		if !tr.Succeeded || tr.Header.Revision != 4 {
			t.Fatalf("read-only txn: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		// Failed compare with writes in the else branch: one revision.
		tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "nope")).
			Then(clientv3.OpPut("x", "1")).
			Else(clientv3.OpPut("y", "1"), clientv3.OpPut("z", "1")).Commit()
		must(t, err)
		if tr.Succeeded || tr.Header.Revision != 5 {
			t.Fatalf("else-write txn: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		g, err = cli.Get(ctx, "x")
		must(t, err)
		if g.Count != 0 {
			t.Fatalf("then-branch write applied on failure")
		}
		// A txn whose only write deletes nothing takes no revision.
		tr, err = cli.Txn(ctx).Then(clientv3.OpDelete("nothing-here")).Commit()
		must(t, err)
		if tr.Header.Revision != 5 || tr.Responses[0].GetResponseDeleteRange().Deleted != 0 {
			t.Fatalf("no-op delete txn: rev %d", tr.Header.Revision)
		}
		wantRev(t, cli, 5)
	})
}

func TestTxnReadsSeeEarlierWrites(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		_, err := cli.Put(ctx, "c", "1") // 2
		must(t, err)
		_, err = cli.Put(ctx, "a", "0") // 3
		must(t, err)

		tr, err := cli.Txn(ctx).Then(
			clientv3.OpGet("a"),
			clientv3.OpPut("a", "1"),
			clientv3.OpGet("a"),
			clientv3.OpDelete("c"),
			clientv3.OpGet("c"),
			clientv3.OpPut("b", "2"),
			clientv3.OpGet("", clientv3.WithFromKey()),
			clientv3.OpGet("", clientv3.WithFromKey(), clientv3.WithCountOnly()),
		).Commit()
		must(t, err)
		if tr.Header.Revision != 4 {
			t.Fatalf("txn revision %d, want 4", tr.Header.Revision)
		}
		r := tr.Responses
		wantKV(t, r[0].GetResponseRange().Kvs[0], "a", "0", 3, 3, 1, 0)
		wantKV(t, r[2].GetResponseRange().Kvs[0], "a", "1", 3, 4, 2, 0)
		if n := r[4].GetResponseRange().Count; n != 0 {
			t.Fatalf("read after delete in txn: count %d", n)
		}
		all := r[6].GetResponseRange()
		if all.Count != 2 {
			t.Fatalf("range after writes in txn: count %d", all.Count)
		}
		wantKeys(t, all.Kvs, "a", "b")
		wantKV(t, all.Kvs[1], "b", "2", 4, 4, 1, 0)
		if n := r[7].GetResponseRange().Count; n != 2 {
			t.Fatalf("count only in txn: %d", n)
		}
	})
}

func TestTxnNested(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		_, err := cli.Put(ctx, "k", "v") // 2
		must(t, err)

		// Every compare of a txn, nested ones included, is evaluated against the
		// state before the txn: the nested compare does not see x=1.
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("k"), "=", "v")).Then(
			clientv3.OpPut("x", "1"),
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value("x"), "=", "1")},
				[]clientv3.Op{clientv3.OpGet("x"), clientv3.OpPut("y", "2")},
				[]clientv3.Op{clientv3.OpGet("x"), clientv3.OpPut("z", "3")},
			),
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Version("x"), "=", 0)},
				[]clientv3.Op{clientv3.OpPut("w", "4"), clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("deep", "5")}, nil)},
				nil,
			),
		).Commit()
		must(t, err)
		if !tr.Succeeded || tr.Header.Revision != 3 || len(tr.Responses) != 3 {
			t.Fatalf("nested txn: succeeded %v rev %d responses %d", tr.Succeeded, tr.Header.Revision, len(tr.Responses))
		}
		inner := tr.Responses[1].GetResponseTxn()
		if inner == nil || inner.Succeeded || len(inner.Responses) != 2 {
			t.Fatalf("inner txn 1: %+v", inner)
		}
		// ...but its reads do see the earlier write.
		wantKV(t, inner.Responses[0].GetResponseRange().Kvs[0], "x", "1", 3, 3, 1, 0)
		inner2 := tr.Responses[2].GetResponseTxn()
		if inner2 == nil || !inner2.Succeeded || len(inner2.Responses) != 2 || inner2.Responses[1].GetResponseTxn() == nil || !inner2.Responses[1].GetResponseTxn().Succeeded {
			t.Fatalf("inner txn 2: %+v", inner2)
		}
		g, err := cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		wantKeys(t, g.Kvs, "deep", "k", "w", "x", "z")
		for _, kv := range g.Kvs {
			if string(kv.Key) != "k" && kv.ModRevision != 3 {
				t.Fatalf("%s written at %d, want 3", kv.Key, kv.ModRevision)
			}
		}
		wantRev(t, cli, 3)
	})
}

// TestTxnNestedSameKeyInBothBranches: a nested Txn may write one key in
// its then and in its else branch, since only one of them runs; etcd allows
// it (a put in one branch and a delete in the other too) and applies the
// branch its compare picks. Two sibling nested Txns writing one key are
// still a duplicate.
func TestTxnNestedSameKeyInBothBranches(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		_, err := cli.Put(ctx, "k", "v") // 2
		must(t, err)
		_, err = cli.Put(ctx, "y", "old") // 3
		must(t, err)

		nested := func(want string) clientv3.Op {
			return clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value("k"), "=", want)},
				[]clientv3.Op{clientv3.OpPut("x", "then"), clientv3.OpDelete("y")},
				[]clientv3.Op{clientv3.OpPut("x", "else"), clientv3.OpPut("y", "else")},
			)
		}
		// The nested compare holds: its then branch runs.
		tr, err := cli.Txn(ctx).Then(nested("v")).Commit()
		must(t, err)
		inner := tr.Responses[0].GetResponseTxn()
		if !tr.Succeeded || tr.Header.Revision != 4 || inner == nil || !inner.Succeeded || len(inner.Responses) != 2 ||
			inner.Responses[0].GetResponsePut() == nil || inner.Responses[1].GetResponseDeleteRange().GetDeleted() != 1 {
			t.Fatalf("nested then: succeeded %v rev %d inner %+v", tr.Succeeded, tr.Header.Revision, inner)
		}
		g, err := cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		wantKeys(t, g.Kvs, "k", "x")
		wantKV(t, g.Kvs[1], "x", "then", 4, 4, 1, 0)

		// It fails: its else branch runs, in the outer else branch too.
		tr, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("k"), "=", "nope")).
			Then(clientv3.OpGet("k")).Else(nested("nope"), clientv3.OpGet("x")).Commit()
		must(t, err)
		inner = tr.Responses[0].GetResponseTxn()
		if tr.Succeeded || tr.Header.Revision != 5 || inner == nil || inner.Succeeded || len(inner.Responses) != 2 {
			t.Fatalf("nested else: succeeded %v rev %d inner %+v", tr.Succeeded, tr.Header.Revision, inner)
		}
		wantKV(t, tr.Responses[1].GetResponseRange().Kvs[0], "x", "else", 4, 5, 2, 0)
		g, err = cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		wantKeys(t, g.Kvs, "k", "x", "y")
		wantKV(t, g.Kvs[2], "y", "else", 5, 5, 1, 0)

		// Each Txn wrote its branch's keys at one revision, nothing else.
		evs := collectEvents(t, cli.Watch(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(4)), 4, 10*time.Second)
		for i, want := range []string{"PUT x then 4", "DELETE y  4", "PUT x else 5", "PUT y else 5"} {
			if got := fmt.Sprintf("%s %s %s %d", evs[i].Type, evs[i].Kv.Key, evs[i].Kv.Value, evs[i].Kv.ModRevision); got != want {
				t.Fatalf("event %d = %s, want %s", i, evString(evs[i]), want)
			}
		}

		// Two nested Txns that may both run still may not write one key.
		_, err = cli.Txn(ctx).Then(nested("v"), clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "again")}, nil)).Commit()
		wantErr(t, err, codes.InvalidArgument, "etcdserver: duplicate key given in txn request")
		wantRev(t, cli, 5)
	})
}

func TestTxnErrors(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		_, err := cli.Put(ctx, "a", "0") // 2
		must(t, err)

		const dup = "etcdserver: duplicate key given in txn request"
		_, err = cli.Txn(ctx).Then(clientv3.OpPut("a", "1"), clientv3.OpPut("a", "2")).Commit()
		wantErr(t, err, codes.InvalidArgument, dup)
		_, err = cli.Txn(ctx).Then(clientv3.OpPut("a", "1"), clientv3.OpDelete("a")).Commit()
		wantErr(t, err, codes.InvalidArgument, dup)
		_, err = cli.Txn(ctx).Then(clientv3.OpDelete("p/", clientv3.WithPrefix()), clientv3.OpPut("p/1", "1")).Commit()
		wantErr(t, err, codes.InvalidArgument, dup)
		_, err = cli.Txn(ctx).Then(clientv3.OpPut("a", "1"), clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("a", "2")}, nil)).Commit()
		wantErr(t, err, codes.InvalidArgument, dup)
		_, err = cli.Txn(ctx).Else(clientv3.OpPut("a", "1"), clientv3.OpPut("a", "2")).Commit()
		wantErr(t, err, codes.InvalidArgument, dup)

		const tooMany = "etcdserver: too many operations in txn request"
		ops := make([]clientv3.Op, 129)
		for i := range ops {
			ops[i] = clientv3.OpPut(fmt.Sprintf("many/%03d", i), "v")
		}
		_, err = cli.Txn(ctx).Then(ops...).Commit()
		wantErr(t, err, codes.InvalidArgument, tooMany)

		_, err = cli.Txn(ctx).Then(clientv3.OpPut("b", "1"), clientv3.OpPut("c", "1", clientv3.WithLease(0x4242))).Commit()
		wantErr(t, err, codes.NotFound, "etcdserver: requested lease not found")
		_, err = cli.Txn(ctx).Then(clientv3.OpPut("missing", "", clientv3.WithIgnoreValue())).Commit()
		wantErr(t, err, codes.InvalidArgument, "etcdserver: key not found")

		_, err = cli.Txn(ctx).Then(clientv3.OpGet("a"), clientv3.OpGet("a", clientv3.WithRev(100))).Commit()
		wantErr(t, err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")

		// None of those took a revision or wrote anything.
		g, err := cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		if g.Header.Revision != 2 || g.Count != 1 {
			t.Fatalf("after errors: rev %d count %d", g.Header.Revision, g.Count)
		}
		wantKV(t, g.Kvs[0], "a", "0", 2, 2, 1, 0)

		// Allowed: the same key in then and else; two deletes of one key; 128 ops;
		// reads of a written key.
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value("a"), "=", "0")).
			Then(clientv3.OpPut("a", "1"), clientv3.OpGet("a")).Else(clientv3.OpPut("a", "2")).Commit()
		must(t, err)
		if !tr.Succeeded || tr.Header.Revision != 3 {
			t.Fatalf("then/else same key: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		tr, err = cli.Txn(ctx).Then(clientv3.OpDelete("a"), clientv3.OpDelete("a", clientv3.WithPrefix())).Commit()
		must(t, err)
		if tr.Header.Revision != 4 || tr.Responses[0].GetResponseDeleteRange().Deleted != 1 || tr.Responses[1].GetResponseDeleteRange().Deleted != 0 {
			t.Fatalf("double delete: rev %d", tr.Header.Revision)
		}
		tr, err = cli.Txn(ctx).Then(ops[:128]...).Commit()
		must(t, err)
		if tr.Header.Revision != 5 {
			t.Fatalf("128-op txn: rev %d", tr.Header.Revision)
		}
		g, err = cli.Get(ctx, "many/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		must(t, err)
		if g.Count != 128 {
			t.Fatalf("128-op txn wrote %d keys", g.Count)
		}
	})
}

// TestKubeTxnShapes drives the exact requests kube-apiserver's storage layer
// sends (k8s.io/apiserver/pkg/storage/etcd3/store.go: Create, conditional
// update and delete, paged lists).
func TestKubeTxnShapes(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		const key = "/registry/configmaps/default/cm"
		notFound := clientv3.Compare(clientv3.ModRevision(key), "=", 0)

		// create
		tr, err := cli.Txn(ctx).If(notFound).Then(clientv3.OpPut(key, "v1")).Commit()
		must(t, err)
		if !tr.Succeeded || tr.Header.Revision != 2 || tr.Responses[0].GetResponsePut().Header.Revision != 2 {
			t.Fatalf("create: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		tr, err = cli.Txn(ctx).If(notFound).Then(clientv3.OpPut(key, "again")).Commit()
		must(t, err)
		if tr.Succeeded || tr.Header.Revision != 2 {
			t.Fatalf("second create: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}

		// update (guaranteed update with a stale revision falls back to a read)
		update := func(rev int64, val string) *clientv3.TxnResponse {
			t.Helper()
			tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
			must(t, err)
			return tr
		}
		if tr := update(2, "v2"); !tr.Succeeded || tr.Header.Revision != 3 {
			t.Fatalf("update: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		tr = update(2, "v3")
		if tr.Succeeded || tr.Header.Revision != 3 {
			t.Fatalf("stale update: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		wantKV(t, tr.Responses[0].GetResponseRange().Kvs[0], key, "v2", 2, 3, 2, 0)

		// delete
		del := func(rev int64) *clientv3.TxnResponse {
			t.Helper()
			tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
			must(t, err)
			return tr
		}
		tr = del(2)
		if tr.Succeeded || tr.Header.Revision != 3 {
			t.Fatalf("stale delete: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		wantKV(t, tr.Responses[0].GetResponseRange().Kvs[0], key, "v2", 2, 3, 2, 0)
		tr = del(3)
		if !tr.Succeeded || tr.Header.Revision != 4 || tr.Responses[0].GetResponseDeleteRange().Deleted != 1 {
			t.Fatalf("delete: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		tr = del(3)
		if tr.Succeeded || tr.Header.Revision != 4 || tr.Responses[0].GetResponseRange().Count != 0 {
			t.Fatalf("delete of deleted: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		// create again: version restarts
		tr, err = cli.Txn(ctx).If(notFound).Then(clientv3.OpPut(key, "v4")).Commit()
		must(t, err)
		if !tr.Succeeded || tr.Header.Revision != 5 {
			t.Fatalf("recreate: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}

		// compaction: CAS on compact_rev_key's version, then Compact.
		const compactKey = "compact_rev_key"
		compactCAS := func(version, rev int64) *clientv3.TxnResponse {
			t.Helper()
			tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(compactKey), "=", version)).
				Then(clientv3.OpPut(compactKey, strconv.FormatInt(rev, 10))).
				Else(clientv3.OpGet(compactKey)).Commit()
			must(t, err)
			return tr
		}
		if tr := compactCAS(0, 4); !tr.Succeeded || tr.Header.Revision != 6 {
			t.Fatalf("compact CAS 1: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		if _, err := cli.Compact(ctx, 4); err != nil {
			t.Fatalf("compact 4: %v", err)
		}
		tr = compactCAS(0, 6)
		if tr.Succeeded {
			t.Fatalf("stale compact CAS succeeded")
		}
		wantKV(t, tr.Responses[0].GetResponseRange().Kvs[0], compactKey, "4", 6, 6, 1, 0)
		if tr := compactCAS(1, 6); !tr.Succeeded || tr.Header.Revision != 7 {
			t.Fatalf("compact CAS 2: succeeded %v rev %d", tr.Succeeded, tr.Header.Revision)
		}
		if _, err := cli.Compact(ctx, 6); err != nil {
			t.Fatalf("compact 6: %v", err)
		}
		g, err := cli.Get(ctx, key)
		must(t, err)
		wantKV(t, g.Kvs[0], key, "v4", 5, 5, 1, 0)
		_, err = cli.Get(ctx, key, clientv3.WithRev(5))
		wantErr(t, err, codes.OutOfRange, "etcdserver: mvcc: required revision has been compacted")
	})
}
