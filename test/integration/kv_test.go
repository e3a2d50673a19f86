package integration

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestEmptyStoreAtRevisionOne(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		resp, err := cli.Get(ctx, "a")
		must(t, err)
		if resp.Header.Revision != 1 || resp.Count != 0 || len(resp.Kvs) != 0 || resp.More {
			t.Fatalf("empty store Get: rev=%d count=%d kvs=%d more=%v, want rev 1 and nothing", resp.Header.Revision, resp.Count, len(resp.Kvs), resp.More)
		}
		resp, err = cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		if resp.Header.Revision != 1 || resp.Count != 0 || len(resp.Kvs) != 0 {
			t.Fatalf("empty store full range: rev=%d count=%d", resp.Header.Revision, resp.Count)
		}
		st, err := cli.Status(ctx, s.Endpoint())
		must(t, err)
		if st.Header.Revision != 1 {
			t.Fatalf("Status revision = %d, want 1", st.Header.Revision)
		}
		p, err := cli.Put(ctx, "a", "1")
		must(t, err)
		if p.Header.Revision != 2 {
			t.Fatalf("first Put revision = %d, want 2", p.Header.Revision)
		}
	})
}

func TestPut(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		p, err := cli.Put(ctx, "k", "v1")
		must(t, err)
		if p.Header.Revision != 2 || p.PrevKv != nil {
			t.Fatalf("put: rev=%d prev=%s", p.Header.Revision, kvString(p.PrevKv))
		}
		g, err := cli.Get(ctx, "k")
		must(t, err)
		if g.Count != 1 || len(g.Kvs) != 1 {
			t.Fatalf("get count=%d", g.Count)
		}
		wantKV(t, g.Kvs[0], "k", "v1", 2, 2, 1, 0)

		p, err = cli.Put(ctx, "k", "v2", clientv3.WithPrevKV())
		must(t, err)
		if p.Header.Revision != 3 {
			t.Fatalf("update revision = %d, want 3", p.Header.Revision)
		}
		wantKV(t, p.PrevKv, "k", "v1", 2, 2, 1, 0)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v2", 2, 3, 2, 0)

		// prev_kv of a key that did not exist is absent.
		p, err = cli.Put(ctx, "new", "x", clientv3.WithPrevKV())
		must(t, err)
		if p.Header.Revision != 4 || p.PrevKv != nil {
			t.Fatalf("create with prev_kv: rev=%d prev=%s", p.Header.Revision, kvString(p.PrevKv))
		}

		// Empty values and binary keys and values round-trip.
		_, err = cli.Put(ctx, "empty", "")
		must(t, err)
		g, err = cli.Get(ctx, "empty")
		must(t, err)
		if g.Count != 1 {
			t.Fatalf("empty value: count=%d", g.Count)
		}
		wantKV(t, g.Kvs[0], "empty", "", 5, 5, 1, 0)
		bkey, bval := "\x00\xffbin\x01", "\xff\x00\xfe"
		_, err = cli.Put(ctx, bkey, bval)
		must(t, err)
		g, err = cli.Get(ctx, bkey)
		must(t, err)
		wantKV(t, g.Kvs[0], bkey, bval, 6, 6, 1, 0)
		wantRev(t, cli, 6)
	})
}

func TestPutIgnoreValueIgnoreLease(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		l, err := cli.Grant(ctx, 600)
		must(t, err)
		lid := int64(l.ID)
		_, err = cli.Put(ctx, "k", "v1", clientv3.WithLease(l.ID))
		must(t, err)
		g, err := cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v1", 2, 2, 1, lid)

		// ignore_value keeps the value; the lease comes from the request (none).
		p, err := cli.Put(ctx, "k", "", clientv3.WithIgnoreValue(), clientv3.WithPrevKV())
		must(t, err)
		wantKV(t, p.PrevKv, "k", "v1", 2, 2, 1, lid)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v1", 2, 3, 2, 0)

		// ignore_value with a lease attaches it, value kept.
		_, err = cli.Put(ctx, "k", "", clientv3.WithIgnoreValue(), clientv3.WithLease(l.ID))
		must(t, err)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v1", 2, 4, 3, lid)

		// ignore_lease keeps the lease, value replaced.
		_, err = cli.Put(ctx, "k", "v2", clientv3.WithIgnoreLease())
		must(t, err)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v2", 2, 5, 4, lid)

		// both: a touch.
		_, err = cli.Put(ctx, "k", "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())
		must(t, err)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v2", 2, 6, 5, lid)

		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		must(t, err)
		if len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "k" {
			t.Fatalf("lease keys = %q, want [k]", ttl.Keys)
		}

		// A plain put detaches the lease.
		_, err = cli.Put(ctx, "k", "v3")
		must(t, err)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v3", 2, 7, 6, 0)
		ttl, err = cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		must(t, err)
		if len(ttl.Keys) != 0 {
			t.Fatalf("lease keys after detach = %q, want none", ttl.Keys)
		}
		// Revoking the lease no longer touches k.
		_, err = cli.Revoke(ctx, l.ID)
		must(t, err)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		if g.Count != 1 {
			t.Fatalf("detached key deleted by revoke")
		}
		wantRev(t, cli, 7)
	})
}

func TestPutErrors(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		_, err := cli.Put(ctx, "exists", "v")
		must(t, err)

		_, err = cli.Put(ctx, "exists", "x", clientv3.WithIgnoreValue())
		wantErr(t, err, codes.InvalidArgument, "etcdserver: value is provided")
		_, err = cli.Put(ctx, "missing", "", clientv3.WithIgnoreValue())
		wantErr(t, err, codes.InvalidArgument, "etcdserver: key not found")
		_, err = cli.Put(ctx, "missing", "v", clientv3.WithIgnoreLease())
		wantErr(t, err, codes.InvalidArgument, "etcdserver: key not found")
		_, err = cli.Put(ctx, "exists", "v", clientv3.WithIgnoreLease(), clientv3.WithLease(0x1234))
		wantErr(t, err, codes.InvalidArgument, "etcdserver: lease is provided")
		_, err = cli.Put(ctx, "k", "v", clientv3.WithLease(0x1234))
		wantErr(t, err, codes.NotFound, "etcdserver: requested lease not found")
		_, err = cli.Put(ctx, "", "v")
		wantErr(t, err, codes.InvalidArgument, "etcdserver: key is not provided")

		g, err := cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		if g.Header.Revision != 2 || g.Count != 1 {
			t.Fatalf("after failed puts: rev=%d count=%d, want rev 2 count 1", g.Header.Revision, g.Count)
		}
		wantKV(t, g.Kvs[0], "exists", "v", 2, 2, 1, 0)
	})
}

func TestRangeEnds(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		for _, k := range []string{"\x01low", "a", "a/1", "a/2", "b", "c", "\xff", "\xff\xff"} {
			_, err := cli.Put(ctx, k, "v:"+k)
			must(t, err)
		}
		all := []string{"\x01low", "a", "a/1", "a/2", "b", "c", "\xff", "\xff\xff"}
		cases := []struct {
			name string
			key  string
			opts []clientv3.OpOption
			want []string
		}{
			{"single", "a", nil, []string{"a"}},
			{"single missing", "a/", nil, nil},
			{"range [a,b)", "a", []clientv3.OpOption{clientv3.WithRange("b")}, []string{"a", "a/1", "a/2"}},
			{"range [a/1,a/2)", "a/1", []clientv3.OpOption{clientv3.WithRange("a/2")}, []string{"a/1"}},
			{"prefix a/", "a/", []clientv3.OpOption{clientv3.WithPrefix()}, []string{"a/1", "a/2"}},
			{"prefix a", "a", []clientv3.OpOption{clientv3.WithPrefix()}, []string{"a", "a/1", "a/2"}},
			{"prefix of 0xff", "\xff", []clientv3.OpOption{clientv3.WithPrefix()}, []string{"\xff", "\xff\xff"}},
			{"from key a/2 (range_end \\x00)", "a/2", []clientv3.OpOption{clientv3.WithRange("\x00")}, []string{"a/2", "b", "c", "\xff", "\xff\xff"}},
			{"from key b", "b", []clientv3.OpOption{clientv3.WithFromKey()}, []string{"b", "c", "\xff", "\xff\xff"}},
			{"key \\x00 range_end \\x00 (all)", "\x00", []clientv3.OpOption{clientv3.WithRange("\x00")}, all},
			{"empty key from key (all)", "", []clientv3.OpOption{clientv3.WithFromKey()}, all},
			{"empty prefix (all)", "", []clientv3.OpOption{clientv3.WithPrefix()}, all},
			{"range_end before key", "c", []clientv3.OpOption{clientv3.WithRange("a")}, nil},
			{"serializable", "a", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSerializable()}, []string{"a", "a/1", "a/2"}},
		}
		for _, tc := range cases {
			g, err := cli.Get(ctx, tc.key, tc.opts...)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if g.Header.Revision != 9 {
				t.Fatalf("%s: header revision %d, want 9", tc.name, g.Header.Revision)
			}
			if g.Count != int64(len(tc.want)) {
				t.Fatalf("%s: count %d, want %d", tc.name, g.Count, len(tc.want))
			}
			t.Run(tc.name, func(t *testing.T) { wantKeys(t, g.Kvs, tc.want...) })
			for _, kv := range g.Kvs {
				if string(kv.Value) != "v:"+string(kv.Key) {
					t.Fatalf("%s: value of %q = %q", tc.name, kv.Key, kv.Value)
				}
			}
		}
	})
}

func TestRangeLimitCountMore(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		for i := range 10 {
			_, err := cli.Put(ctx, fmt.Sprintf("k%02d", i), "v") // revisions 2..11
			must(t, err)
		}
		_, err := cli.Put(ctx, "l", "outside") // 12
		must(t, err)

		type want struct {
			keys  []string
			count int64
			more  bool
		}
		check := func(name string, w want, opts ...clientv3.OpOption) {
			t.Helper()
			g, err := cli.Get(ctx, "k", append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if g.Count != w.count || g.More != w.more {
				t.Fatalf("%s: count=%d more=%v, want count=%d more=%v", name, g.Count, g.More, w.count, w.more)
			}
			wantKeys(t, g.Kvs, w.keys...)
		}
		check("limit 3", want{[]string{"k00", "k01", "k02"}, 10, true}, clientv3.WithLimit(3))
		check("limit 9", want{[]string{"k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08"}, 10, true}, clientv3.WithLimit(9))
		check("limit 10", want{[]string{"k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09"}, 10, false}, clientv3.WithLimit(10))
		check("limit 11", want{[]string{"k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09"}, 10, false}, clientv3.WithLimit(11))
		check("limit 0 (none)", want{[]string{"k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09"}, 10, false}, clientv3.WithLimit(0))
		check("limit 2 keys only", want{[]string{"k00", "k01"}, 10, true}, clientv3.WithLimit(2), clientv3.WithKeysOnly())
		check("count only ignores limit", want{nil, 10, false}, clientv3.WithLimit(2), clientv3.WithCountOnly())
		// Paged list pinned to a past revision: at revision 6, k00..k04 exist.
		check("limit 2 at rev 6", want{[]string{"k00", "k01"}, 5, true}, clientv3.WithLimit(2), clientv3.WithRev(6))
		check("count only at rev 6", want{nil, 5, false}, clientv3.WithCountOnly(), clientv3.WithRev(6))
		check("at rev 1", want{nil, 0, false}, clientv3.WithLimit(2), clientv3.WithRev(1))
		// A second page starting after the first page's last key.
		g, err := cli.Get(ctx, "k02\x00", clientv3.WithRange("l"), clientv3.WithLimit(3), clientv3.WithRev(6))
		must(t, err)
		if g.Count != 2 || g.More || g.Header.Revision != 12 {
			t.Fatalf("page 2 at rev 6: count=%d more=%v rev=%d, want 2 false 12", g.Count, g.More, g.Header.Revision)
		}
		wantKeys(t, g.Kvs, "k03", "k04")

		d, err := cli.Delete(ctx, "k0", clientv3.WithRange("k05")) // 13: deletes k00..k04
		must(t, err)
		if d.Deleted != 5 || d.Header.Revision != 13 {
			t.Fatalf("delete: deleted=%d rev=%d", d.Deleted, d.Header.Revision)
		}
		check("after delete limit 2", want{[]string{"k05", "k06"}, 5, true}, clientv3.WithLimit(2))
		check("before delete limit 2", want{[]string{"k00", "k01"}, 10, true}, clientv3.WithLimit(2), clientv3.WithRev(12))
	})
}

func TestRangePastRevisions(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		steps := []func() error{
			func() error { _, err := cli.Put(ctx, "a", "1"); return err }, // 2
			func() error { _, err := cli.Put(ctx, "a", "2"); return err }, // 3
			func() error { _, err := cli.Put(ctx, "b", "1"); return err }, // 4
			func() error { _, err := cli.Delete(ctx, "a"); return err },   // 5
			func() error { _, err := cli.Put(ctx, "a", "3"); return err }, // 6
		}
		for _, f := range steps {
			must(t, f())
		}
		at := func(key string, rev int64, opts ...clientv3.OpOption) *clientv3.GetResponse {
			t.Helper()
			g, err := cli.Get(ctx, key, append(opts, clientv3.WithRev(rev))...)
			must(t, err)
			if g.Header.Revision != 6 {
				t.Fatalf("read at %d: header revision %d, want the current 6", rev, g.Header.Revision)
			}
			return g
		}
		wantKV(t, at("a", 2).Kvs[0], "a", "1", 2, 2, 1, 0)
		wantKV(t, at("a", 3).Kvs[0], "a", "2", 2, 3, 2, 0)
		wantKV(t, at("a", 4).Kvs[0], "a", "2", 2, 3, 2, 0)
		if g := at("a", 5); g.Count != 0 || len(g.Kvs) != 0 {
			t.Fatalf("a at 5 (deleted): count %d", g.Count)
		}
		wantKV(t, at("a", 6).Kvs[0], "a", "3", 6, 6, 1, 0)
		if g := at("a", 1); g.Count != 0 {
			t.Fatalf("a at 1: count %d", g.Count)
		}
		for rev, want := range map[int64][]string{1: nil, 2: {"a"}, 3: {"a"}, 4: {"a", "b"}, 5: {"b"}, 6: {"a", "b"}} {
			g := at("", rev, clientv3.WithFromKey())
			if g.Count != int64(len(want)) {
				t.Fatalf("all at %d: count %d, want %d", rev, g.Count, len(want))
			}
			wantKeys(t, g.Kvs, want...)
			c := at("", rev, clientv3.WithFromKey(), clientv3.WithCountOnly())
			if c.Count != int64(len(want)) || len(c.Kvs) != 0 {
				t.Fatalf("count only at %d: count %d kvs %d", rev, c.Count, len(c.Kvs))
			}
		}
		// Revision 0 means the latest.
		g, err := cli.Get(ctx, "a", clientv3.WithRev(0))
		must(t, err)
		wantKV(t, g.Kvs[0], "a", "3", 6, 6, 1, 0)

		_, err = cli.Get(ctx, "a", clientv3.WithRev(7))
		wantErr(t, err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")
		_, err = cli.Get(ctx, "a", clientv3.WithRev(1000), clientv3.WithCountOnly())
		wantErr(t, err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")
	})
}

func TestRangeKeysOnlyCountOnly(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		for _, k := range []string{"p/a", "p/b", "p/c"} {
			_, err := cli.Put(ctx, k, "value-"+k)
			must(t, err)
		}
		_, err := cli.Put(ctx, "p/b", "again") // 5
		must(t, err)

		g, err := cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		must(t, err)
		if g.Count != 3 || len(g.Kvs) != 3 {
			t.Fatalf("keys only: count %d kvs %d", g.Count, len(g.Kvs))
		}
		wantKV(t, g.Kvs[0], "p/a", "", 2, 2, 1, 0)
		wantKV(t, g.Kvs[1], "p/b", "", 3, 5, 2, 0)
		wantKV(t, g.Kvs[2], "p/c", "", 4, 4, 1, 0)

		g, err = cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		must(t, err)
		if g.Count != 3 || len(g.Kvs) != 0 || g.More {
			t.Fatalf("count only: count %d kvs %d more %v", g.Count, len(g.Kvs), g.More)
		}
		g, err = cli.Get(ctx, "p/b", clientv3.WithCountOnly())
		must(t, err)
		if g.Count != 1 || len(g.Kvs) != 0 {
			t.Fatalf("count only single: count %d kvs %d", g.Count, len(g.Kvs))
		}
		// keys_only with sort by value still sorts by the (hidden) values.
		g, err = cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend))
		must(t, err)
		wantKeys(t, g.Kvs, "p/c", "p/a", "p/b")
		for _, kv := range g.Kvs {
			if len(kv.Value) != 0 {
				t.Fatalf("keys only returned a value for %q", kv.Key)
			}
		}
	})
}

// sortFixture writes three keys whose key, create, mod, version and value
// orders all differ:
//
//	k1: create 3, mod 9, version 4, value "c"
//	k2: create 4, mod 6, version 3, value "a"
//	k3: create 2, mod 10, version 2, value "b"
func sortFixture(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx := testCtx(t)
	for _, kv := range [][2]string{{"k3", "b"}, {"k1", "c"}, {"k2", "a"}, {"k2", "a"}, {"k2", "a"}, {"k1", "c"}, {"k1", "c"}, {"k1", "c"}, {"k3", "b"}} {
		_, err := cli.Put(ctx, kv[0], kv[1])
		must(t, err)
	}
	_, err := cli.Put(ctx, "z", "outside") // 11
	must(t, err)
	g, err := cli.Get(ctx, "k", clientv3.WithPrefix())
	must(t, err)
	wantKV(t, g.Kvs[0], "k1", "c", 3, 9, 4, 0)
	wantKV(t, g.Kvs[1], "k2", "a", 4, 6, 3, 0)
	wantKV(t, g.Kvs[2], "k3", "b", 2, 10, 2, 0)
}

func TestRangeSort(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		sortFixture(t, cli)

		cases := []struct {
			target clientv3.SortTarget
			order  clientv3.SortOrder
			want   []string
			first  string // with limit 1, when not want[0]
		}{
			{clientv3.SortByKey, clientv3.SortAscend, []string{"k1", "k2", "k3"}, ""},
			{clientv3.SortByKey, clientv3.SortDescend, []string{"k3", "k2", "k1"}, ""},
			{clientv3.SortByCreateRevision, clientv3.SortAscend, []string{"k3", "k1", "k2"}, ""},
			{clientv3.SortByCreateRevision, clientv3.SortDescend, []string{"k2", "k1", "k3"}, ""},
			{clientv3.SortByModRevision, clientv3.SortAscend, []string{"k2", "k1", "k3"}, ""},
			{clientv3.SortByModRevision, clientv3.SortDescend, []string{"k3", "k1", "k2"}, ""},
			{clientv3.SortByVersion, clientv3.SortAscend, []string{"k3", "k2", "k1"}, ""},
			{clientv3.SortByVersion, clientv3.SortDescend, []string{"k1", "k2", "k3"}, ""},
			{clientv3.SortByValue, clientv3.SortAscend, []string{"k2", "k3", "k1"}, ""},
			{clientv3.SortByValue, clientv3.SortDescend, []string{"k1", "k3", "k2"}, ""},
			// A target other than the key with order NONE sorts ascending.
			{clientv3.SortByValue, clientv3.SortNone, []string{"k2", "k3", "k1"}, ""},
			{clientv3.SortByModRevision, clientv3.SortNone, []string{"k2", "k1", "k3"}, ""},
			// ...but with a limit, etcd sorts only the first limit+1 keys: k1
			// and k2 here, not k3, which sorts first.
			{clientv3.SortByCreateRevision, clientv3.SortNone, []string{"k3", "k1", "k2"}, "k1"},
			{clientv3.SortByVersion, clientv3.SortNone, []string{"k3", "k2", "k1"}, "k2"},
		}
		for _, tc := range cases {
			name := fmt.Sprintf("%v/%v", tc.target, tc.order)
			g, err := cli.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithSort(tc.target, tc.order))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			t.Run(name, func(t *testing.T) { wantKeys(t, g.Kvs, tc.want...) })
			// With a limit, the sort applies before the limit.
			first := tc.want[0]
			if tc.first != "" {
				first = tc.first
			}
			g, err = cli.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithSort(tc.target, tc.order), clientv3.WithLimit(1))
			if err != nil {
				t.Fatalf("%s limit 1: %v", name, err)
			}
			if g.Count != 3 || !g.More {
				t.Fatalf("%s limit 1: count %d more %v", name, g.Count, g.More)
			}
			t.Run(name+"/limit1", func(t *testing.T) { wantKeys(t, g.Kvs, first) })
		}
		// Sorting at a past revision (rev 6: k3 v1 mod 2, k1 v1 mod 3, k2 v3 mod 6).
		g, err := cli.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(6), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend))
		must(t, err)
		wantKeys(t, g.Kvs, "k2", "k1", "k3")
	})
}

func TestRangeRevisionFilters(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		sortFixture(t, cli)

		cases := []struct {
			name string
			opts []clientv3.OpOption
			want []string
			more bool
		}{
			{"min mod 7", []clientv3.OpOption{clientv3.WithMinModRev(7)}, []string{"k1", "k3"}, false},
			{"min mod 10", []clientv3.OpOption{clientv3.WithMinModRev(10)}, []string{"k3"}, false},
			{"max mod 6", []clientv3.OpOption{clientv3.WithMaxModRev(6)}, []string{"k2"}, false},
			{"max mod 9", []clientv3.OpOption{clientv3.WithMaxModRev(9)}, []string{"k1", "k2"}, false},
			{"min create 3", []clientv3.OpOption{clientv3.WithMinCreateRev(3)}, []string{"k1", "k2"}, false},
			{"max create 3", []clientv3.OpOption{clientv3.WithMaxCreateRev(3)}, []string{"k1", "k3"}, false},
			{"min create 3 max create 3", []clientv3.OpOption{clientv3.WithMinCreateRev(3), clientv3.WithMaxCreateRev(3)}, []string{"k1"}, false},
			{"min mod 7 max create 2", []clientv3.OpOption{clientv3.WithMinModRev(7), clientv3.WithMaxCreateRev(2)}, []string{"k3"}, false},
			{"min mod 11 (none)", []clientv3.OpOption{clientv3.WithMinModRev(11)}, nil, false},
			{"min create 3 limit 1", []clientv3.OpOption{clientv3.WithMinCreateRev(3), clientv3.WithLimit(1)}, []string{"k1"}, true},
			{"max mod 9 sorted by mod desc", []clientv3.OpOption{clientv3.WithMaxModRev(9), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend)}, []string{"k1", "k2"}, false},
		}
		for _, tc := range cases {
			g, err := cli.Get(ctx, "k", append([]clientv3.OpOption{clientv3.WithPrefix()}, tc.opts...)...)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			// etcd's Count is the number of keys in the range before the
			// revision filters apply; More says whether the limit cut the
			// filtered list.
			if g.Count != 3 || g.More != tc.more {
				t.Fatalf("%s: count %d more %v, want count 3 more %v", tc.name, g.Count, g.More, tc.more)
			}
			t.Run(tc.name, func(t *testing.T) { wantKeys(t, g.Kvs, tc.want...) })
		}
	})
}

func TestDeleteRange(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		for _, k := range []string{"a", "b/1", "b/2", "b/3", "c"} { // 2..6
			_, err := cli.Put(ctx, k, "v:"+k)
			must(t, err)
		}
		_, err := cli.Put(ctx, "b/2", "v2") // 7
		must(t, err)

		d, err := cli.Delete(ctx, "a", clientv3.WithPrevKV())
		must(t, err)
		if d.Deleted != 1 || d.Header.Revision != 8 || len(d.PrevKvs) != 1 {
			t.Fatalf("delete a: deleted %d rev %d prev %d", d.Deleted, d.Header.Revision, len(d.PrevKvs))
		}
		wantKV(t, d.PrevKvs[0], "a", "v:a", 2, 2, 1, 0)

		d, err = cli.Delete(ctx, "b/", clientv3.WithPrefix(), clientv3.WithPrevKV())
		must(t, err)
		if d.Deleted != 3 || d.Header.Revision != 9 || len(d.PrevKvs) != 3 {
			t.Fatalf("delete b/: deleted %d rev %d prev %d", d.Deleted, d.Header.Revision, len(d.PrevKvs))
		}
		wantKV(t, d.PrevKvs[0], "b/1", "v:b/1", 3, 3, 1, 0)
		wantKV(t, d.PrevKvs[1], "b/2", "v2", 4, 7, 2, 0)
		wantKV(t, d.PrevKvs[2], "b/3", "v:b/3", 5, 5, 1, 0)

		// Deleting nothing takes no revision.
		d, err = cli.Delete(ctx, "zzz", clientv3.WithPrevKV())
		must(t, err)
		if d.Deleted != 0 || d.Header.Revision != 9 || len(d.PrevKvs) != 0 {
			t.Fatalf("delete missing: deleted %d rev %d", d.Deleted, d.Header.Revision)
		}
		d, err = cli.Delete(ctx, "b/", clientv3.WithPrefix())
		must(t, err)
		if d.Deleted != 0 || d.Header.Revision != 9 {
			t.Fatalf("delete deleted prefix: deleted %d rev %d", d.Deleted, d.Header.Revision)
		}

		// All of b/ went away at one revision: present at 8, gone at 9.
		g, err := cli.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(8))
		must(t, err)
		wantKeys(t, g.Kvs, "b/1", "b/2", "b/3")
		g, err = cli.Get(ctx, "b/", clientv3.WithPrefix(), clientv3.WithRev(9))
		must(t, err)
		wantKeys(t, g.Kvs)
		wch := cli.Watch(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(8))
		evs := collectEvents(t, wch, 4, 10*time.Second)
		for i, want := range []string{"a", "b/1", "b/2", "b/3"} {
			rev := int64(9)
			if i == 0 {
				rev = 8
			}
			if evs[i].Type != clientv3.EventTypeDelete || string(evs[i].Kv.Key) != want || evs[i].Kv.ModRevision != rev {
				t.Fatalf("event %d = %s, want DELETE %s at %d", i, evString(evs[i]), want, rev)
			}
		}

		// Without prev_kv none are returned.
		d, err = cli.Delete(ctx, "a", clientv3.WithRange("d"))
		must(t, err)
		if d.Deleted != 1 || d.Header.Revision != 10 || len(d.PrevKvs) != 0 {
			t.Fatalf("delete [a,d): deleted %d rev %d prev %d", d.Deleted, d.Header.Revision, len(d.PrevKvs))
		}
		g, err = cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		if g.Count != 0 || g.Header.Revision != 10 {
			t.Fatalf("after deletes: count %d rev %d", g.Count, g.Header.Revision)
		}
	})
}

func TestVersionRestartsAfterDelete(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		for range 3 {
			_, err := cli.Put(ctx, "k", "v") // 2, 3, 4
			must(t, err)
		}
		g, err := cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v", 2, 4, 3, 0)
		_, err = cli.Delete(ctx, "k") // 5
		must(t, err)
		_, err = cli.Put(ctx, "k", "w") // 6
		must(t, err)
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "w", 6, 6, 1, 0)
		g, err = cli.Get(ctx, "k", clientv3.WithRev(4))
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v", 2, 4, 3, 0)
		tr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("k"), "=", 1), clientv3.Compare(clientv3.CreateRevision("k"), "=", 6)).Commit()
		must(t, err)
		if !tr.Succeeded {
			t.Fatalf("version/create compare after recreate failed")
		}
	})
}
