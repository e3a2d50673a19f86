package history

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/proto/historypb"
	"github.com/quantyroot/quantykube/test/framework"
)

// TestLogWindowsAndRangeGet writes a second apart, then lists every
// window of the log, in both orders and in pages of one, against the
// model; and lists the range at every revision and time in pages of one,
// every page of a listing at the revision its first page read.
func TestLogWindowsAndRangeGet(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		clk := newClock()
		e := startEnv(t, b, clk, nil)
		m := newModel()
		keys := []string{"/w/a", "/w/b", "/w/c"}
		for i := range 9 {
			clk.advance(time.Second)
			k := keys[i%3]
			if i%4 == 3 {
				rev, ok := e.del(k)
				if ok {
					m.del(k, rev, clk.nowMs())
				}
				continue
			}
			v := fmt.Sprint("v", i)
			m.put(k, v, e.put(k, v), clk.nowMs(), 0)
		}
		clk.advance(time.Second)
		cur := e.rev()
		rangeEnd := []byte("/w0")
		for from := int64(0); from <= cur; from++ {
			for to := max(from, 1); to <= cur+1; to++ {
				var want []change
				for _, c := range m.changes {
					if c.rev >= from && c.rev <= to {
						want = append(want, c)
					}
				}
				endRev := to
				if to > cur {
					endRev = 0 // the store's revision now
				}
				up, _ := e.logAll(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, Revision: from, EndRevision: endRev, Limit: 1}, 100)
				down, _ := e.logAll(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, Revision: from, EndRevision: endRev, Descending: true, Limit: 1}, 100)
				if len(up) != len(want) || len(down) != len(want) {
					t.Fatalf("[%d, %d]: %d entries up, %d down, want %d", from, to, len(up), len(down), len(want))
				}
				slices.Reverse(down)
				for i, c := range want {
					wantEntry(t, up[i], c)
					wantEntry(t, down[i], c)
				}
			}
		}
		// Times: [unix_ms, end_unix_ms), the end exclusive, in the future now.
		first, last := m.changes[0].ms, m.changes[len(m.changes)-1].ms
		for from := first - 500; from <= last; from += 500 {
			for end := from + 500; end <= last+2000; end += 500 {
				var want []change
				for _, c := range m.changes {
					if c.ms >= from && c.ms < end {
						want = append(want, c)
					}
				}
				got, _ := e.logAll(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, UnixMs: from, EndUnixMs: end, Descending: true, Limit: 2}, 100)
				if len(got) != len(want) {
					t.Fatalf("[%d ms, %d ms): %d entries, want %d", from-first, end-first, len(got), len(want))
				}
				slices.Reverse(got)
				for i, c := range want {
					wantEntry(t, got[i], c)
				}
			}
		}

		// The range at every revision, a key a page.
		listAt := func(req *historypb.Request) (int64, []string) {
			var got []string
			var rev int64
			for range 10 {
				resp := e.mustGet(req)
				if rev != 0 && resp.Revision != rev {
					t.Fatalf("a page read revision %d after one read %d", resp.Revision, rev)
				}
				rev = resp.Revision
				if resp.Kv != nil || len(resp.Kvs) > 1 {
					t.Fatalf("a range page of limit 1: kv %v, %d kvs", resp.Kv, len(resp.Kvs))
				}
				for _, kv := range resp.Kvs {
					got = append(got, kvString(kv))
				}
				if resp.Continue == "" {
					return rev, got
				}
				req.Continue = resp.Continue
				// Later pages read the first page's revision, whatever
				// is written meanwhile.
				req.Revision, req.UnixMs = 0, 0
			}
			t.Fatal("more than 10 pages")
			return 0, nil
		}
		wantAt := func(rev int64) []string {
			var want []string
			for _, k := range keys {
				if kv := m.stateAt(k, rev); kv != nil {
					want = append(want, kvString(kv))
				}
			}
			return want
		}
		for rev := int64(1); rev <= cur; rev++ {
			_, got := listAt(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, Revision: rev, Limit: 1})
			if want := wantAt(rev); !slices.Equal(got, want) {
				t.Fatalf("the range at %d: %q, want %q", rev, got, want)
			}
		}
		for ms := first - 500; ms <= last+500; ms += 500 {
			rev, got := listAt(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, UnixMs: ms, Limit: 1})
			if rev != m.revAt(ms) {
				t.Fatalf("the range at %d ms read revision %d, want %d", ms-first, rev, m.revAt(ms))
			}
			if want := wantAt(rev); !slices.Equal(got, want) {
				t.Fatalf("the range at %d ms: %q, want %q", ms-first, got, want)
			}
		}
		// Now, across a write between pages: the listing stays at its revision.
		resp := e.mustGet(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, Limit: 1})
		e.put("/w/0", "new")
		_, rest := listAt(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, Limit: 1, Continue: resp.Continue})
		if want := wantAt(resp.Revision); !slices.Equal(append([]string{kvString(resp.Kvs[0])}, rest...), want) {
			t.Fatalf("the range now, across a write: %q then %q, want %q", kvString(resp.Kvs[0]), rest, want)
		}

		_, err := e.hist.Log(testCtx(t), &historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, Revision: 5, EndRevision: 4})
		wantCode(t, err, codes.InvalidArgument, "a window that ends before it starts")
		_, err = e.get(&historypb.Request{Key: []byte("/w/"), RangeEnd: rangeEnd, Revision: cur + 100})
		wantCode(t, err, codes.OutOfRange, "the range at a future revision")
	})
}
