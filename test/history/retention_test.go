package history

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"

	"github.com/quantyroot/quantykube/test/framework"
)

// retain is the shortest retention the server accepts.
const retain = 75 * time.Second

// startRetaining starts a server of backend b on a test clock that keeps
// history for retain and prunes only when the test says so.
func startRetaining(t *testing.T, b framework.Backend) (*env, *clock) {
	t.Helper()
	clk := newClock()
	e := startEnv(t, b, clk, func(cfg *endpoint.Config) { cfg.Retain, cfg.PruneInterval = retain, time.Hour })
	return e, clk
}

// prune runs retention now and returns how many rows it removed.
func (e *env) prune() int {
	e.t.Helper()
	n, err := e.x.Server().Store().Prune(testCtx(e.t))
	if err != nil {
		e.t.Fatalf("Prune: %v", err)
	}
	return n
}

// rfc3339In finds the RFC 3339 times in s.
var rfc3339In = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)

// wantFloorMessage asserts an OUT_OF_RANGE message names the oldest
// retained revision and its time.
func wantFloorMessage(t *testing.T, msg string, floor, floorMs int64) {
	t.Helper()
	if !regexp.MustCompile(`\b` + strconv.FormatInt(floor, 10) + `\b`).MatchString(msg) {
		t.Fatalf("OUT_OF_RANGE message %q does not name the oldest retained revision %d", msg, floor)
	}
	for _, s := range rfc3339In.FindAllString(msg, -1) {
		if tm, err := time.Parse(time.RFC3339Nano, s); err == nil && tm.UnixMilli() == floorMs {
			return
		}
	}
	t.Fatalf("OUT_OF_RANGE message %q does not name the floor's time %s", msg, time.UnixMilli(floorMs).UTC().Format(time.RFC3339Nano))
}

// TestOutOfRangeBelowFloor: after pruning, a revision below the floor, or a
// time before the floor's, answers OUT_OF_RANGE naming the oldest retained
// revision and its time, for Get, Restore and Log; the floor itself and
// every revision after it read as before.
func TestOutOfRangeBelowFloor(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e, clk := startRetaining(t, b)
		m := newModel()
		for i := range 10 {
			clk.advance(10 * time.Second)
			m.put("/o/k", fmt.Sprint("v", i), e.put("/o/k", fmt.Sprint("v", i)), clk.nowMs(), 0)
		}
		// Now is 150 s after the first write; the window starts 75 s ago.
		clk.advance(50 * time.Second)
		cutoff := clk.nowMs() - retain.Milliseconds()
		floor := m.revAt(cutoff)
		floorMs := m.msOf(floor)
		if n := e.prune(); n == 0 {
			t.Fatal("Prune removed nothing")
		}
		key := []byte("/o/k")
		for _, r := range []*historypb.Request{
			{Key: key, Revision: floor - 1},
			{Key: key, Revision: 1},
			{Key: key, UnixMs: floorMs - 1},
			{Key: key, UnixMs: m.changes[0].ms},
		} {
			_, err := e.get(r)
			st := wantCode(t, err, codes.OutOfRange, "Get below the floor "+r.String())
			wantFloorMessage(t, st.Message(), floor, floorMs)
			_, err = e.hist.Restore(testCtx(t), r)
			st = wantCode(t, err, codes.OutOfRange, "Restore below the floor "+r.String())
			wantFloorMessage(t, st.Message(), floor, floorMs)
			_, err = e.hist.Log(testCtx(t), r)
			wantCode(t, err, codes.OutOfRange, "Log from below the floor "+r.String())
		}
		for _, r := range []*historypb.Request{{Key: key, Revision: floor}, {Key: key, UnixMs: floorMs}} {
			resp := e.mustGet(r)
			if resp.Revision != floor || kvString(resp.Kv) != kvString(m.stateAt("/o/k", floor)) {
				t.Fatalf("Get at the floor %v: rev %d %s, want %d %s", r, resp.Revision, kvString(resp.Kv), floor, kvString(m.stateAt("/o/k", floor)))
			}
		}
		// Log from 0 lists what is retained: every change from the floor on,
		// and before it at most the key's last change (the state the floor's
		// change replaced, kept whole; its own prev_kv is gone).
		entries, _ := e.logAll(&historypb.Request{Key: key}, 5)
		if len(entries) > 0 && entries[0].Revision < floor {
			if entries[0].Revision != floor-1 || entries[0].PrevKv != nil {
				t.Fatalf("Log after pruning starts with %s, want the change before the floor %d without prev_kv", entryString(entries[0]), floor)
			}
			entries = entries[1:]
		}
		var want []change
		for _, c := range m.changes {
			if c.rev >= floor {
				want = append(want, c)
			}
		}
		if len(entries) != len(want) {
			t.Fatalf("Log after pruning: %d entries from the floor on, want %d", len(entries), len(want))
		}
		for i := range want {
			wantEntry(t, entries[i], want[i])
		}
	})
}

// TestEtcdFloorRisesAfterPruning: pruning raises the floor the etcd API
// reports: a Range or Watch below it answers etcd's compacted error, at it
// they work.
func TestEtcdFloorRisesAfterPruning(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e, clk := startRetaining(t, b)
		m := newModel()
		for i := range 8 {
			clk.advance(20 * time.Second)
			m.put("/e/k", fmt.Sprint("v", i), e.put("/e/k", fmt.Sprint("v", i)), clk.nowMs(), 0)
		}
		ctx := testCtx(t)
		// Before pruning, every revision reads.
		if _, err := e.etcd.Get(ctx, "/e/k", clientv3.WithRev(2)); err != nil {
			t.Fatalf("Get at revision 2 before pruning: %v", err)
		}
		floor := m.revAt(clk.nowMs() - retain.Milliseconds())
		if floor <= 2 {
			t.Fatalf("test setup: floor %d", floor)
		}
		e.prune()
		for _, r := range []int64{2, floor - 1} {
			_, err := e.etcd.Get(ctx, "/e/k", clientv3.WithRev(r))
			if !errors.Is(err, rpctypes.ErrCompacted) {
				t.Fatalf("etcd Get at revision %d below the floor %d: %v, want %v", r, floor, err, rpctypes.ErrCompacted)
			}
		}
		resp, err := e.etcd.Get(ctx, "/e/k", clientv3.WithRev(floor))
		must(t, err)
		if len(resp.Kvs) != 1 || kvString(resp.Kvs[0]) != kvString(m.stateAt("/e/k", floor)) {
			t.Fatalf("etcd Get at the floor: %v", resp.Kvs)
		}
		// A watch from below the floor is cancelled with the floor as its
		// compact revision.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		wr, ok := <-e.etcd.Watch(wctx, "/e/k", clientv3.WithRev(floor-1))
		if !ok || !errors.Is(wr.Err(), rpctypes.ErrCompacted) || wr.CompactRevision != floor {
			t.Fatalf("watch from %d: ok=%v err=%v compact=%d, want compacted at %d", floor-1, ok, wr.Err(), wr.CompactRevision, floor)
		}
		// A watch from the floor replays every change from there.
		wch := e.etcd.Watch(ctx, "/e/k", clientv3.WithRev(floor))
		var got []int64
		timeout := time.After(10 * time.Second)
		for int64(len(got)) < e.rev()-floor+1 {
			select {
			case wr := <-wch:
				must(t, wr.Err())
				for _, ev := range wr.Events {
					got = append(got, ev.Kv.ModRevision)
				}
			case <-timeout:
				t.Fatalf("watch from the floor: %v", got)
			}
		}
		if got[0] != floor {
			t.Fatalf("watch from the floor %d starts at %d", floor, got[0])
		}
		// An explicit Compact below the retention floor does not lower it.
		_, err = e.etcd.Compact(ctx, 2)
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("Compact(2): %v", err)
		}
		if _, err := e.etcd.Get(ctx, "/e/k", clientv3.WithRev(floor-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("after Compact(2): Get at %d: %v", floor-1, err)
		}
	})
}

// TestRetainPrefix: a prefix rule prunes its keys on its own window while
// the default rule (keep everything) leaves other keys' history whole.
func TestRetainPrefix(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		clk := newClock()
		e := startEnv(t, b, clk, func(cfg *endpoint.Config) {
			cfg.RetainPrefixes = []mvcc.RetentionRule{{Prefix: []byte("/leases/"), Retain: retain}}
			cfg.PruneInterval = time.Hour
		})
		m := newModel()
		for i := range 10 {
			clk.advance(20 * time.Second)
			m.put("/leases/hb", fmt.Sprint("beat", i), e.put("/leases/hb", fmt.Sprint("beat", i)), clk.nowMs(), 0)
			m.put("/obj/x", fmt.Sprint("x", i), e.put("/obj/x", fmt.Sprint("x", i)), clk.nowMs(), 0)
		}
		e.prune()
		old := m.changes[0].rev
		_, err := e.get(&historypb.Request{Key: []byte("/leases/hb"), Revision: old})
		wantCode(t, err, codes.OutOfRange, "Get of a heartbeat key below its rule's floor")
		for r := old; r <= e.rev(); r++ {
			resp := e.mustGet(&historypb.Request{Key: []byte("/obj/x"), Revision: r})
			if kvString(resp.Kv) != kvString(m.stateAt("/obj/x", r)) {
				t.Fatalf("/obj/x at %d after pruning /leases/: %s, want %s", r, kvString(resp.Kv), kvString(m.stateAt("/obj/x", r)))
			}
		}
		entries, _ := e.logAll(&historypb.Request{Key: []byte("/obj/x")}, 5)
		if len(entries) != 10 {
			t.Fatalf("log of /obj/x: %d entries after pruning /leases/, want 10", len(entries))
		}
		entries, _ = e.logAll(&historypb.Request{Key: []byte("/leases/hb")}, 5)
		if len(entries) >= 10 || len(entries) == 0 {
			t.Fatalf("log of /leases/hb: %d entries after pruning, want fewer than 10", len(entries))
		}
	})
}

// snapshot is every answer of the store inside a window: Get of each key
// at each revision and at each time, and the log of the keys.
type snapshot struct {
	byRev  map[string]string
	byTime map[string]string
}

func (e *env) snapshot(keys []string, fromRev, toRev int64, times []int64) snapshot {
	e.t.Helper()
	s := snapshot{byRev: map[string]string{}, byTime: map[string]string{}}
	for r := fromRev; r <= toRev; r++ {
		for _, k := range keys {
			resp := e.mustGet(&historypb.Request{Key: []byte(k), Revision: r})
			s.byRev[fmt.Sprint(k, "@", r)] = fmt.Sprint(resp.Revision, " ", kvString(resp.Kv))
		}
	}
	for _, ms := range times {
		for _, k := range keys {
			resp := e.mustGet(&historypb.Request{Key: []byte(k), UnixMs: ms})
			s.byTime[fmt.Sprint(k, "@", ms)] = fmt.Sprint(resp.Revision, " ", kvString(resp.Kv))
		}
	}
	return s
}

// TestPruningKeepsWindowProperty: random puts and deletes over a few keys
// at random intervals (some in the same millisecond); then, in rounds, the
// clock moves on and retention prunes. Every state at every revision and at
// every time inside the window reads the same before and after each round,
// and as the model says; everything before the window is OUT_OF_RANGE; the
// log keeps every change from the floor on whole (the floor's own
// included) and at most the last change before it per key; the etcd API reads the same at every revision from
// the floor.
func TestPruningKeepsWindowProperty(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { pruningProperty(t, b, seed) })
		}
	})
}

func pruningProperty(t *testing.T, b framework.Backend, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	e, clk := startRetaining(t, b)
	m := newModel()
	keys := []string{"/w/a", "/w/b", "/w/c", "/w/d"}
	write := func(n int) {
		for range n {
			clk.advance(time.Duration(rng.IntN(3)) * time.Duration(rng.IntN(1500)) * time.Millisecond)
			k := keys[rng.IntN(len(keys))]
			if rng.IntN(4) == 0 {
				rev, ok := e.del(k)
				if ok != (m.live[k] != nil) {
					t.Fatalf("delete %s: deleted=%v, model has %s", k, ok, kvString(m.live[k]))
				}
				if ok {
					m.del(k, rev, clk.nowMs())
				}
				continue
			}
			v := fmt.Sprintf("%s=%d", k, rng.IntN(1000))
			m.put(k, v, e.put(k, v), clk.nowMs(), 0)
		}
	}
	write(150)
	allKeys := append(keys, "/w/never")
	floor, floorMs := int64(1), int64(0)
	for round := range 4 {
		clk.advance(time.Duration(20+rng.IntN(40)) * time.Second)
		cur := e.rev()
		cutoff := clk.nowMs() - retain.Milliseconds()
		newFloor := max(floor, m.revAt(cutoff))
		if newFloor > floor {
			floor, floorMs = newFloor, m.msOf(newFloor)
		}
		var times []int64
		for _, c := range m.changes {
			if c.ms >= floorMs {
				times = append(times, c.ms-1, c.ms, c.ms+1)
			}
		}
		times = append(times, clk.nowMs())
		var inWindow []int64
		for _, ms := range times {
			if ms >= floorMs {
				inWindow = append(inWindow, ms)
			}
		}
		before := e.snapshot(allKeys, floor, cur, inWindow)
		logBefore, _ := e.logAll(&historypb.Request{Key: []byte("/w/"), RangeEnd: []byte("/w0"), Limit: 50}, 100)
		e.prune()
		after := e.snapshot(allKeys, floor, cur, inWindow)
		for k, v := range before.byRev {
			if after.byRev[k] != v {
				t.Fatalf("round %d: Get %s: before pruning %s, after %s", round, k, v, after.byRev[k])
			}
			rev, _ := strconv.ParseInt(k[strings.Index(k, "@")+1:], 10, 64)
			if want := fmt.Sprint(rev, " ", kvString(m.stateAt(k[:strings.Index(k, "@")], rev))); v != want {
				t.Fatalf("round %d: Get %s = %s, model says %s", round, k, v, want)
			}
		}
		for k, v := range before.byTime {
			if after.byTime[k] != v {
				t.Fatalf("round %d: Get %s (time): before pruning %s, after %s", round, k, v, after.byTime[k])
			}
			ms, _ := strconv.ParseInt(k[strings.Index(k, "@")+1:], 10, 64)
			rev := m.revAt(ms)
			if want := fmt.Sprint(rev, " ", kvString(m.stateAt(k[:strings.Index(k, "@")], rev))); v != want {
				t.Fatalf("round %d: Get %s (time) = %s, model says %s", round, k, v, want)
			}
		}
		// Below the window: OUT_OF_RANGE.
		if floor > 1 {
			for _, k := range allKeys {
				_, err := e.get(&historypb.Request{Key: []byte(k), Revision: floor - 1})
				wantCode(t, err, codes.OutOfRange, fmt.Sprintf("round %d: Get %s at floor-1 %d", round, k, floor-1))
				_, err = e.get(&historypb.Request{Key: []byte(k), UnixMs: floorMs - 1})
				wantCode(t, err, codes.OutOfRange, fmt.Sprintf("round %d: Get %s before the floor's time", round, k))
			}
		}
		// The log: every change from the floor on as before, the changes
		// at the floor included (pruning keeps their rows and their
		// prev_kv); before it, at most the last change of each key, never
		// a delete.
		logAfter, _ := e.logAll(&historypb.Request{Key: []byte("/w/"), RangeEnd: []byte("/w0"), Limit: 50}, 100)
		var keptBefore, keptAfter []string
		for _, en := range logBefore {
			if en.Revision >= floor {
				keptBefore = append(keptBefore, entryString(en))
			}
		}
		seen := map[string]bool{}
		for _, en := range logAfter {
			switch {
			case en.Revision >= floor:
				keptAfter = append(keptAfter, entryString(en))
			case en.Revision < floor:
				k := string(en.Kv.Key)
				if seen[k] || en.Deleted != 0 || kvString(en.Kv) != kvString(m.stateAt(k, floor-1)) {
					t.Fatalf("round %d: retained entry below the floor %d: %s (model at floor-1: %s)", round, floor, entryString(en), kvString(m.stateAt(k, floor-1)))
				}
				seen[k] = true
			}
		}
		if strings.Join(keptBefore, "\n") != strings.Join(keptAfter, "\n") {
			t.Fatalf("round %d: log from the floor %d on changed by pruning:\nbefore\n%s\nafter\n%s", round, floor, strings.Join(keptBefore, "\n"), strings.Join(keptAfter, "\n"))
		}
		// The etcd API: the same floor, and the same state from it on.
		ctx := testCtx(t)
		if floor > 1 {
			if _, err := e.etcd.Get(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(floor-1)); !errors.Is(err, rpctypes.ErrCompacted) {
				t.Fatalf("round %d: etcd Get at floor-1 %d: %v, want compacted", round, floor-1, err)
			}
		}
		for r := floor; r <= cur; r++ {
			resp, err := e.etcd.Get(ctx, "/w/", clientv3.WithPrefix(), clientv3.WithRev(r))
			must(t, err)
			var want []*mvccpb.KeyValue
			for _, k := range keys {
				if kv := m.stateAt(k, r); kv != nil {
					want = append(want, kv)
				}
			}
			if fmt.Sprint(kvsString(resp.Kvs)) != fmt.Sprint(kvsString(want)) {
				t.Fatalf("round %d: etcd Get /w/ at %d = %v, want %v", round, r, kvsString(resp.Kvs), kvsString(want))
			}
		}
		t.Logf("round %d: revisions %d..%d, floor %d, %d log entries before pruning, %d after", round, 1, cur, floor, len(logBefore), len(logAfter))
		write(40 + rng.IntN(40))
	}
}

func kvsString(kvs []*mvccpb.KeyValue) []string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, kvString(kv))
	}
	return out
}

// TestFloorSurvivesRestart: the retention floor is persisted: after a
// restart on the same database, History and the etcd API still refuse
// what was pruned and read everything from the floor on.
func TestFloorSurvivesRestart(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e, clk := startRetaining(t, b)
		m := newModel()
		for i := range 10 {
			clk.advance(15 * time.Second)
			m.put("/s/k", fmt.Sprint("v", i), e.put("/s/k", fmt.Sprint("v", i)), clk.nowMs(), 0)
		}
		floor := m.revAt(clk.nowMs() - retain.Milliseconds())
		e.prune()
		e.restart()
		_, err := e.get(&historypb.Request{Key: []byte("/s/k"), Revision: floor - 1})
		st := wantCode(t, err, codes.OutOfRange, "Get below the floor after a restart")
		wantFloorMessage(t, st.Message(), floor, m.msOf(floor))
		if _, err := e.etcd.Get(testCtx(t), "/s/k", clientv3.WithRev(floor-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("etcd Get below the floor after a restart: %v", err)
		}
		for r := floor; r <= e.rev(); r++ {
			resp := e.mustGet(&historypb.Request{Key: []byte("/s/k"), Revision: r})
			if kvString(resp.Kv) != kvString(m.stateAt("/s/k", r)) {
				t.Fatalf("after a restart, Get at %d = %s, want %s", r, kvString(resp.Kv), kvString(m.stateAt("/s/k", r)))
			}
		}
	})
}

// TestCompactDoesNotShortenHistory: the apiserver's Compact moves only the
// etcd API's floor; History keeps serving what retention keeps.
func TestCompactDoesNotShortenHistory(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e := startEnv(t, b, nil, nil)
		r1 := e.put("/c/k", "v1")
		e.put("/c/k", "v2")
		r3 := e.put("/c/k", "v3")
		_, err := e.etcd.Compact(testCtx(t), r3)
		must(t, err)
		if _, err := e.etcd.Get(testCtx(t), "/c/k", clientv3.WithRev(r1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("etcd Get below Compact: %v", err)
		}
		resp := e.mustGet(&historypb.Request{Key: []byte("/c/k"), Revision: r1})
		if resp.Kv == nil || string(resp.Kv.Value) != "v1" {
			t.Fatalf("History Get below Compact: %s, want v1", kvString(resp.Kv))
		}
		entries, _ := e.logAll(&historypb.Request{Key: []byte("/c/k")}, 5)
		if len(entries) != 3 {
			t.Fatalf("History Log after Compact: %d entries, want 3", len(entries))
		}
	})
}
