package history

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/proto/historypb"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestTimeTravel writes, overwrites and deletes keys a second apart, and
// reads every key at every revision and at every time (each commit time,
// just before and just after it, and between), then checks each answer
// against the state of that moment.
func TestTimeTravel(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		clk := newClock()
		e := startEnv(t, b, clk, nil)
		m := newModel()
		first := clk.nowMs()
		step := func(d time.Duration) { clk.advance(d) }

		step(time.Second)
		m.put("/tt/a", "a1", e.put("/tt/a", "a1"), clk.nowMs(), 0)
		step(time.Second)
		m.put("/tt/b", "b1", e.put("/tt/b", "b1"), clk.nowMs(), 0)
		step(time.Second)
		m.put("/tt/a", "a2", e.put("/tt/a", "a2"), clk.nowMs(), 0)
		step(time.Second)
		rev, ok := e.del("/tt/a")
		if !ok {
			t.Fatal("delete of /tt/a deleted nothing")
		}
		m.del("/tt/a", rev, clk.nowMs())
		step(time.Second)
		m.put("/tt/a", "a3", e.put("/tt/a", "a3"), clk.nowMs(), 0) // re-created: a new create_revision
		// Two writes in the same millisecond: a time names the newer.
		m.put("/tt/b", "b2", e.put("/tt/b", "b2"), clk.nowMs(), 0)
		step(time.Second)
		rev, _ = e.del("/tt/b")
		m.del("/tt/b", rev, clk.nowMs())
		step(time.Second)
		cur := e.rev()
		if cur != 8 {
			t.Fatalf("current revision %d, want 8 after 7 writes", cur)
		}
		keys := []string{"/tt/a", "/tt/b", "/tt/never"}

		// Every revision.
		for r := int64(1); r <= cur; r++ {
			for _, k := range keys {
				resp := e.mustGet(&historypb.Request{Key: []byte(k), Revision: r})
				if resp.Revision != r {
					t.Fatalf("Get(%s, rev %d) read revision %d", k, r, resp.Revision)
				}
				if got, want := kvString(resp.Kv), kvString(m.stateAt(k, r)); got != want {
					t.Fatalf("Get(%s, rev %d) = %s, want %s", k, r, got, want)
				}
			}
		}
		// Every time: before the first write, at, around and between commits.
		times := []int64{first - 60000, first}
		for _, c := range m.changes {
			times = append(times, c.ms-1, c.ms, c.ms+1, c.ms+500)
		}
		times = append(times, clk.nowMs())
		for _, ms := range times {
			wantRev := m.revAt(ms)
			for _, k := range keys {
				resp := e.mustGet(&historypb.Request{Key: []byte(k), UnixMs: ms})
				if resp.Revision != wantRev {
					t.Fatalf("Get(%s, %s) read revision %d, want %d", k, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), resp.Revision, wantRev)
				}
				if got, want := kvString(resp.Kv), kvString(m.stateAt(k, wantRev)); got != want {
					t.Fatalf("Get(%s, %s) = %s, want %s", k, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), got, want)
				}
			}
		}

		// Neither revision nor time: the current revision.
		resp := e.mustGet(&historypb.Request{Key: []byte("/tt/a")})
		if resp.Revision != cur || kvString(resp.Kv) != kvString(m.stateAt("/tt/a", cur)) {
			t.Fatalf("Get(/tt/a, now) = rev %d %s, want rev %d %s", resp.Revision, kvString(resp.Kv), cur, kvString(m.stateAt("/tt/a", cur)))
		}
		// Both: invalid.
		_, err := e.get(&historypb.Request{Key: []byte("/tt/a"), Revision: 2, UnixMs: first})
		wantCode(t, err, codes.InvalidArgument, "Get with revision and unix_ms")

		// The log of /tt/a says the same, with prev_kv absent on each create.
		var want []change
		for _, c := range m.changes {
			if c.key == "/tt/a" {
				want = append(want, c)
			}
		}
		entries, _ := e.logAll(&historypb.Request{Key: []byte("/tt/a")}, 5)
		if len(entries) != len(want) {
			t.Fatalf("Log(/tt/a): %d entries, want %d", len(entries), len(want))
		}
		for i := range entries {
			wantEntry(t, entries[i], want[i])
		}
	})
}

// TestOutOfRangeFuture: a revision or a time after now answers
// OUT_OF_RANGE, for every method; the current revision and now do not.
func TestOutOfRangeFuture(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		clk := newClock()
		e := startEnv(t, b, clk, nil)
		clk.advance(time.Second)
		e.put("/f/k", "v")
		cur := e.rev()
		now := clk.nowMs()
		key := []byte("/f/k")
		for _, r := range []*historypb.Request{
			{Key: key, Revision: cur + 1},
			{Key: key, Revision: cur + 1000000},
			{Key: key, UnixMs: now + 1},
			{Key: key, UnixMs: now + int64(time.Hour/time.Millisecond)},
		} {
			_, err := e.get(r)
			st := wantCode(t, err, codes.OutOfRange, "Get future "+r.String())
			if st.Message() == "" {
				t.Fatalf("OUT_OF_RANGE without a message")
			}
			_, err = e.hist.Restore(testCtx(t), r)
			wantCode(t, err, codes.OutOfRange, "Restore future "+r.String())
		}
		_, err := e.hist.Log(testCtx(t), &historypb.Request{Key: key, Revision: cur + 1})
		wantCode(t, err, codes.OutOfRange, "Log from a future revision")
		_, err = e.hist.Log(testCtx(t), &historypb.Request{Key: key, UnixMs: now + 60000})
		wantCode(t, err, codes.OutOfRange, "Log from a future time")

		// The edges themselves are in range.
		if resp := e.mustGet(&historypb.Request{Key: key, Revision: cur}); resp.Kv == nil {
			t.Fatal("Get at the current revision: absent")
		}
		if resp := e.mustGet(&historypb.Request{Key: key, UnixMs: now}); resp.Revision != cur || resp.Kv == nil {
			t.Fatalf("Get at now: revision %d %s, want %d", resp.Revision, kvString(resp.Kv), cur)
		}
	})
}
