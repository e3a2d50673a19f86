package history

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/proto/historypb"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestLogPagingLargeLog: 2,500 changes to one key, read 1,000 at a time,
// come in 3 pages, oldest first, with no gap and no duplicate; each entry
// chains to the one before through prev_kv.
func TestLogPagingLargeLog(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e := startEnv(t, b, nil, nil)
		const n, workers = 2500, 16
		revs := make([][]int64, workers)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := testCtx(t)
				for i := w; i < n; i += workers {
					resp, err := e.etcd.Put(ctx, "/big", fmt.Sprintf("v%04d", i))
					if err != nil {
						errs <- err
						return
					}
					revs[w] = append(revs[w], resp.Header.Revision)
				}
			}()
		}
		e.put("/big0", "not in the log of /big")
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("put: %v", err)
		}
		var want []int64
		for _, r := range revs {
			want = append(want, r...)
		}
		sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
		cur := e.rev()

		entries, pages := e.logAll(&historypb.Request{Key: []byte("/big"), Limit: 1000}, 10)
		if len(pages) != 3 || len(pages[0].Entries) != 1000 || len(pages[1].Entries) != 1000 || len(pages[2].Entries) != 500 {
			var sizes []int
			for _, p := range pages {
				sizes = append(sizes, len(p.Entries))
			}
			t.Fatalf("page sizes %v, want [1000 1000 500]", sizes)
		}
		for i, p := range pages {
			if p.HeaderRevision != cur {
				t.Fatalf("page %d: header_revision %d, want %d", i, p.HeaderRevision, cur)
			}
			if (p.Continue == "") != (i == len(pages)-1) {
				t.Fatalf("page %d: continue %q", i, p.Continue)
			}
		}
		if len(entries) != n {
			t.Fatalf("%d entries, want %d", len(entries), n)
		}
		for i, en := range entries {
			if en.Revision != want[i] {
				t.Fatalf("entry %d: revision %d, want %d (gap, duplicate or disorder)", i, en.Revision, want[i])
			}
			if string(en.Kv.Key) != "/big" || en.Kv.ModRevision != en.Revision || en.Kv.Version != int64(i+1) || en.Deleted != 0 || en.UnixMs == 0 {
				t.Fatalf("entry %d: %s", i, entryString(en))
			}
			if i == 0 {
				if en.PrevKv != nil {
					t.Fatalf("first entry (the create) has prev_kv %s", kvString(en.PrevKv))
				}
			} else if kvString(en.PrevKv) != kvString(entries[i-1].Kv) {
				t.Fatalf("entry %d: prev_kv %s, want the entry before: %s", i, kvString(en.PrevKv), kvString(entries[i-1].Kv))
			}
			if i > 0 && en.UnixMs < entries[i-1].UnixMs {
				t.Fatalf("entry %d: time goes back: %d < %d", i, en.UnixMs, entries[i-1].UnixMs)
			}
		}

		// The default page is 1,000; a limit above 10,000 takes at most 10,000.
		resp, err := e.hist.Log(testCtx(t), &historypb.Request{Key: []byte("/big")})
		must(t, err)
		if len(resp.Entries) != 1000 || resp.Continue == "" {
			t.Fatalf("default page: %d entries, continue %q", len(resp.Entries), resp.Continue)
		}
		resp, err = e.hist.Log(testCtx(t), &historypb.Request{Key: []byte("/big"), Limit: 50000})
		must(t, err)
		if len(resp.Entries) != n || resp.Continue != "" {
			t.Fatalf("limit 50000: %d entries, continue %q", len(resp.Entries), resp.Continue)
		}
		// A lower bound by revision starts there.
		from := want[1234]
		got, _ := e.logAll(&historypb.Request{Key: []byte("/big"), Revision: from, Limit: 700}, 10)
		if len(got) != n-1234 || got[0].Revision != from || got[len(got)-1].Revision != want[n-1] {
			t.Fatalf("from revision %d: %d entries, first %d", from, len(got), got[0].Revision)
		}
		// A token this server did not give is refused.
		_, err = e.hist.Log(testCtx(t), &historypb.Request{Key: []byte("/big"), Continue: "garbage"})
		wantCode(t, err, codes.InvalidArgument, "Log with a bad continue token")
	})
}

// TestLogPrefixAndRange: the log of a prefix and of a range holds exactly
// their keys' changes in revision order (keys written in one Txn share a
// revision), with delete entries carrying key and mod_revision, and paging
// by one entry walks through a revision that changed several keys.
func TestLogPrefixAndRange(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		clk := newClock()
		e := startEnv(t, b, clk, nil)
		ctx := testCtx(t)
		m := newModel()
		put := func(k, v string) {
			clk.advance(10 * time.Millisecond)
			m.put(k, v, e.put(k, v), clk.nowMs(), 0)
		}
		put("/p", "the prefix itself, without the slash")
		put("/p/a", "a1")
		put("/q/x", "x1")
		put("/p/b", "b1")
		// Three keys in one revision.
		clk.advance(10 * time.Millisecond)
		txn, err := e.etcd.Txn(ctx).Then(
			clientv3.OpPut("/p/c", "c1"), clientv3.OpPut("/p/a", "a2"), clientv3.OpPut("/q/y", "y1"),
		).Commit()
		must(t, err)
		for _, kv := range [][2]string{{"/p/c", "c1"}, {"/p/a", "a2"}, {"/q/y", "y1"}} {
			m.put(kv[0], kv[1], txn.Header.Revision, clk.nowMs(), 0)
		}
		put("/p0", "after the prefix")
		clk.advance(10 * time.Millisecond)
		rev, _ := e.del("/p/b")
		m.del("/p/b", rev, clk.nowMs())
		put("/p/b", "b2")
		put("/p/c", "c2")
		sinceMs := clk.nowMs() + 5
		clk.advance(10 * time.Millisecond)
		dr, err := e.etcd.Delete(ctx, "/p/", clientv3.WithPrefix())
		must(t, err)
		for _, k := range []string{"/p/a", "/p/b", "/p/c"} {
			m.del(k, dr.Header.Revision, clk.nowMs())
		}

		check := func(name string, req *historypb.Request, in func(k string) bool, fromRev, fromMs int64) {
			t.Helper()
			var want []change
			for _, c := range m.changes {
				if in(c.key) && c.rev >= fromRev && c.ms >= fromMs {
					want = append(want, c)
				}
			}
			// Within a revision, the store's order is its own; compare as sets per revision.
			for _, limit := range []int64{0, 1, 2, 3} {
				r := &historypb.Request{Key: req.Key, RangeEnd: req.RangeEnd, Revision: req.Revision, UnixMs: req.UnixMs, Limit: limit}
				got, pages := e.logAll(r, 100)
				if len(got) != len(want) {
					for _, g := range got {
						t.Logf("got %s", entryString(g))
					}
					t.Fatalf("%s (limit %d): %d entries, want %d", name, limit, len(got), len(want))
				}
				// A page is full only when more follow: no empty last page.
				if limit > 0 && len(pages) != max(1, (len(want)+int(limit)-1)/int(limit)) {
					t.Fatalf("%s (limit %d): %d pages for %d entries", name, limit, len(pages), len(want))
				}
				byKey := map[string]change{}
				for i, g := range got {
					if g.Revision != want[i].rev {
						t.Fatalf("%s (limit %d): entry %d revision %d, want %d", name, limit, i, g.Revision, want[i].rev)
					}
					byKey[fmt.Sprint(want[i].rev, want[i].key)] = want[i]
				}
				for i, g := range got {
					c, ok := byKey[fmt.Sprint(g.Revision, string(g.Kv.GetKey()))]
					if !ok {
						t.Fatalf("%s (limit %d): unexpected entry %d %s", name, limit, i, entryString(g))
					}
					delete(byKey, fmt.Sprint(g.Revision, string(g.Kv.GetKey())))
					wantEntry(t, g, c)
				}
			}
		}
		isP := func(k string) bool { return len(k) > 3 && k[:3] == "/p/" }
		check("prefix /p/", &historypb.Request{Key: []byte("/p/"), RangeEnd: []byte("/p0")}, isP, 0, 0)
		check("range [/p/a, /p/c)", &historypb.Request{Key: []byte("/p/a"), RangeEnd: []byte("/p/c")},
			func(k string) bool { return k >= "/p/a" && k < "/p/c" }, 0, 0)
		check("every key from /p0", &historypb.Request{Key: []byte("/p0"), RangeEnd: []byte{0}},
			func(k string) bool { return k >= "/p0" }, 0, 0)
		check("one key /p", &historypb.Request{Key: []byte("/p")}, func(k string) bool { return k == "/p" }, 0, 0)
		check("prefix /p/ from the txn's revision", &historypb.Request{Key: []byte("/p/"), RangeEnd: []byte("/p0"), Revision: txn.Header.Revision}, isP, txn.Header.Revision, 0)
		check("prefix /p/ from a time", &historypb.Request{Key: []byte("/p/"), RangeEnd: []byte("/p0"), UnixMs: sinceMs}, isP, 0, sinceMs)
		// The bound is inclusive, as a revision bound is: a change committed
		// at exactly that millisecond is listed.
		exact := m.changes[len(m.changes)-5].ms
		check("prefix /p/ from the exact time of a change", &historypb.Request{Key: []byte("/p/"), RangeEnd: []byte("/p0"), UnixMs: exact}, isP, 0, exact)
		check("an empty range", &historypb.Request{Key: []byte("/p/x"), RangeEnd: []byte("/p/z")}, func(string) bool { return false }, 0, 0)

		_, err = e.hist.Log(ctx, &historypb.Request{Key: []byte("/p/"), Revision: 2, UnixMs: clk.nowMs()})
		wantCode(t, err, codes.InvalidArgument, "Log with revision and unix_ms")
	})
}

// TestLogSinceQuietPeriod: a Log from a past time after which nothing was
// written lists nothing; it is not a future revision.
func TestLogSinceQuietPeriod(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		clk := newClock()
		e := startEnv(t, b, clk, nil)
		clk.advance(time.Second)
		e.put("/q/k", "v")
		clk.advance(10 * time.Second)
		for _, req := range []*historypb.Request{
			{Key: []byte("/q/k"), UnixMs: clk.nowMs() - 5000},
			{Key: []byte("/q/k"), UnixMs: clk.nowMs()},
			{Key: []byte("/q/"), RangeEnd: []byte("/q0"), UnixMs: clk.nowMs() - 5000},
		} {
			resp, err := e.hist.Log(testCtx(t), req)
			if err != nil {
				t.Fatalf("Log(%v) from a past time with no change since: %v, want an empty page", req, err)
			}
			if len(resp.Entries) != 0 || resp.Continue != "" {
				t.Fatalf("Log(%v): %d entries, continue %q; want none", req, len(resp.Entries), resp.Continue)
			}
		}
		// Likewise on a store that was never written.
		e2 := startEnv(t, b, newClock(), nil)
		if _, err := e2.hist.Log(testCtx(t), &historypb.Request{Key: []byte("/q/k"), UnixMs: clockStart.UnixMilli() - 60000}); err != nil {
			t.Fatalf("Log of an empty store from a past time: %v", err)
		}
	})
}
