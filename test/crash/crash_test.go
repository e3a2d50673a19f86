package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestCrashRecovery runs writers and a watcher against the server, kills it
// with SIGKILL at a random moment under load, restarts it on the same data,
// and checks after every restart:
//
//   - every acknowledged write is present with exactly its acknowledged
//     revision (or was overwritten by a later write of the same writer that is
//     acknowledged or was in flight);
//   - an in-flight write is either absent or complete (a two-key Txn has both
//     keys or neither), with a revision of its own;
//   - no revision is acknowledged twice, across restarts too, and each run's
//     acknowledged revisions are above the revision it started at;
//   - the store's revision is >= every acknowledged revision and every
//     revision a watcher was sent;
//   - a watcher resumed from its last revision + 1 sees strictly increasing
//     revisions with no gap and no duplicate at the seam, every acknowledged
//     or recovered write exactly once, with correct prev_kv, create_revision
//     and version;
//   - the state Range returns equals the state the watch stream implies.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped with -short")
	}
	rounds := envInt(t, "QUANTY_CRASH_ROUNDS", 5, 1, 50)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QUANTY_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("QUANTY_CRASH_SEED: %v", err)
		}
		seed = v
	}
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		crashRecovery(t, b, rounds, seed)
	})
}

func crashRecovery(t *testing.T, b framework.Backend, rounds int, seed uint64) {
	t.Logf("%d kills, seed %d (QUANTY_CRASH_SEED)", rounds, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	started := time.Now()

	x := framework.Start(t, b, framework.Options{Process: true})
	f := newFindings()
	ck := newChecker(f)
	writers := make([]*writer, numWriters)
	for i := range writers {
		writers[i] = newWriter(i, seed)
	}

	var prev *watcher
	for run := 0; run <= rounds; run++ {
		label := fmt.Sprintf("run %d", run)
		if run > 0 {
			label = fmt.Sprintf("run %d (restart after kill %d)", run, run)
			x.Start(t)
		}
		cli, err := framework.NewClient(x.Endpoint())
		if err != nil {
			t.Fatalf("%s: client: %v", label, err)
		}

		// Recovery: Range everything and hold it against the writers' views.
		rev0, actual, applied := ck.recover(t, cli, run, writers)
		if run > 0 {
			t.Logf("%s: store at revision %d with %d keys; %d in-flight writes found applied", label, rev0, len(actual), applied)
		}
		// The previous run's events can be judged now that every in-flight
		// write is resolved.
		if prev != nil {
			ck.processEvents(prev.take())
		}
		if rev0 < ck.lastRev {
			f.add("store revision below a revision already sent to a watcher", "%s: store revision %d after restart, but the watcher was sent revision %d before the kill", label, rev0, ck.lastRev)
		}
		// A new watcher from the last revision seen + 1; it must catch up to rev0.
		w := startWatcher(cli, ck.lastRev+1)
		if ck.catchUp(t, cli, w, rev0, label) {
			ck.checkCoverage(rev0, label)
			ck.compareState(actual, label)
		}
		if run == rounds {
			w.stop()
			_ = cli.Close()
			break
		}

		// Load, then kill -9 at a random moment.
		stop := make(chan struct{})
		var killed atomic.Bool
		var errs errCounter
		var wg sync.WaitGroup
		allDone := make(chan struct{})
		for _, wr := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wr.run(cli, run, stop, &killed, f, &errs)
			}()
		}
		go func() { wg.Wait(); close(allDone) }()
		delay := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		select {
		case <-time.After(delay):
		case <-allDone:
			t.Logf("%s: every writer finished its %d ops before the kill", label, maxOpsRound)
		}
		killed.Store(true)
		x.Kill(t)
		close(stop)
		w.stop()
		_ = cli.Close()
		select {
		case <-allDone:
		case <-time.After(opTimeout + 5*time.Second):
			t.Fatalf("%s: writers still running %v after the kill", label, opTimeout+5*time.Second)
		}
		acked, inflight := ck.collect(writers, run, rev0)
		if acked < minAckedPerRun {
			// Without load the kill proves nothing: fail rather than pass vacuously.
			f.add("too few writes acknowledged to test anything", "%s: %d writes acknowledged in %v by %d writers (want at least %d); write errors: %s",
				label, acked, delay, numWriters, minAckedPerRun, errs.String())
		}
		t.Logf("%s: started at revision %d, killed after %v: %d writes acknowledged, %d in flight, %d watch events; write errors: %s",
			label, rev0, delay, acked, inflight, w.count(), errs.String())
		prev = w
	}
	t.Logf("done in %v: %d writes in the ledger, %d watch events checked, last revision %d", time.Since(started).Round(time.Millisecond), len(ck.ledger), ck.events, ck.lastRev)
	if n := f.total(); n > 0 {
		t.Errorf("%d violations:%s", n, f)
	}
}

// minAckedPerRun is the least number of acknowledged writes a server run
// must produce before its kill for the run to count.
const minAckedPerRun = 20

func envInt(t *testing.T, name string, def, lo, hi int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		t.Fatalf("%s=%q: want an integer in [%d, %d]", name, s, lo, hi)
	}
	return v
}

// evRec is one watch event as received.
type evRec struct {
	typ                  mvccpb.Event_EventType
	key, value           string
	mod, create, version int64
	hasPrev              bool
	prevMod, prevVersion int64
	prevValue            string
}

// watcher records the events of one watch over prefix on one server run.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu          sync.Mutex
	events      []evRec
	taken       int
	lastRev     int64
	progressRev int64
	problems    []string
}

func startWatcher(cli *clientv3.Client, from int64) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, done: make(chan struct{})}
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	go func() {
		defer close(w.done)
		for resp := range wch {
			w.mu.Lock()
			if resp.Canceled || resp.Err() != nil {
				if ctx.Err() == nil {
					w.problems = append(w.problems, fmt.Sprintf("watch from %d ended: canceled=%v compact_revision=%d err=%v", from, resp.Canceled, resp.CompactRevision, resp.Err()))
				}
			}
			if resp.IsProgressNotify() {
				w.progressRev = max(w.progressRev, resp.Header.Revision)
			}
			for _, ev := range resp.Events {
				r := evRec{typ: ev.Type, key: string(ev.Kv.Key), value: string(ev.Kv.Value), mod: ev.Kv.ModRevision, create: ev.Kv.CreateRevision, version: ev.Kv.Version}
				if ev.PrevKv != nil {
					r.hasPrev, r.prevMod, r.prevVersion, r.prevValue = true, ev.PrevKv.ModRevision, ev.PrevKv.Version, string(ev.PrevKv.Value)
				}
				w.events = append(w.events, r)
				w.lastRev = max(w.lastRev, r.mod)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// take returns the events not taken before.
func (w *watcher) take() []evRec {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.events[w.taken:]
	w.taken = len(w.events)
	return evs
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

func (w *watcher) stop() {
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
	}
}

// checker holds what the test knows across runs: every write with a known
// revision, and the state the watch stream implies.
type checker struct {
	f *findings

	ledger  map[int64]*op // revision -> the write that took it
	maxAck  int64         // highest acknowledged revision
	pending map[string]*op

	// Recovered deletes whose revision only a watch event can tell.
	unboundDeletes map[string]*op

	watchState map[string]kvState
	lastRev    int64           // last revision processed from the watch
	revKeys    map[string]bool // keys seen at lastRev
	seen       map[string]int  // "rev key" -> events seen
	events     int
	initRev    int64
}

func newChecker(f *findings) *checker {
	return &checker{f: f, ledger: map[int64]*op{}, pending: map[string]*op{}, unboundDeletes: map[string]*op{},
		watchState: map[string]kvState{}, revKeys: map[string]bool{}, seen: map[string]int{}}
}

func seenKey(rev int64, key string) string { return strconv.FormatInt(rev, 10) + " " + key }

// record adds an applied write with a known revision to the ledger.
func (ck *checker) record(o *op, runStart int64, what string) {
	if o.rev <= runStart {
		ck.f.add("revision not above the run's starting revision", "%s %s got revision %d, but the server run started at revision %d", what, o, o.rev, runStart)
	}
	if other := ck.ledger[o.rev]; other != nil {
		ck.f.add("revision given to two writes", "revision %d: %s, and %s %s", o.rev, other, what, o)
		return
	}
	ck.ledger[o.rev] = o
}

// collect takes the writers' acknowledged writes of a run into the ledger
// and remembers their in-flight writes for the next recovery.
func (ck *checker) collect(writers []*writer, run int, runStart int64) (acked, inflight int) {
	for _, w := range writers {
		for _, o := range w.ops {
			acked++
			if o.applied {
				ck.record(o, runStart, "acknowledged")
				ck.maxAck = max(ck.maxAck, o.rev)
			}
		}
		if w.pending != nil {
			inflight++
			for _, k := range w.pending.keys {
				ck.pending[k] = w.pending
			}
		}
	}
	return acked, inflight
}

// rangeAll reads every key under prefix at one revision, in pages.
func rangeAll(t *testing.T, cli *clientv3.Client, label string) (int64, map[string]kvState) {
	t.Helper()
	out := map[string]kvState{}
	end := clientv3.GetPrefixRangeEnd(prefix)
	key, rev := prefix, int64(0)
	for page := 0; page < 10000; page++ {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(2000)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, err := cli.Get(ctx, key, opts...)
		cancel()
		if err != nil {
			t.Fatalf("%s: Range %q at revision %d: %v", label, key, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = kvState{string(kv.Value), kv.ModRevision, kv.CreateRevision, kv.Version}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, out
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	t.Fatalf("%s: Range did not finish in 10000 pages", label)
	return 0, nil
}

// recover checks the store after a (re)start against the writers' views,
// resolves in-flight writes, and resyncs the views to the store.
func (ck *checker) recover(t *testing.T, cli *clientv3.Client, run int, writers []*writer) (rev0 int64, actual map[string]kvState, applied int) {
	t.Helper()
	label := fmt.Sprintf("after restart %d", run)
	rev0, actual = rangeAll(t, cli, label)
	if run == 0 {
		ck.initRev = rev0
		ck.lastRev = rev0
		for k, s := range actual {
			ck.f.add("store not empty at start", "key %s: %s", k, s)
		}
		return rev0, actual, 0
	}
	if rev0 < ck.maxAck {
		ck.f.add("store revision below an acknowledged revision", "%s: store revision %d, but revision %d was acknowledged", label, rev0, ck.maxAck)
	}

	expected := map[string]kvState{}
	owner := map[string]*writer{}
	for _, w := range writers {
		for k, s := range w.state {
			expected[k] = s
			owner[k] = w
		}
	}
	keys := map[string]bool{}
	for k := range expected {
		keys[k] = true
	}
	for k := range actual {
		keys[k] = true
	}
	for k := range ck.pending {
		keys[k] = true
	}

	// In-flight writes first: each is all there or not there at all.
	resolved := map[*op]bool{}
	for _, o := range ck.pending {
		if resolved[o] {
			continue
		}
		resolved[o] = true
		nNew, nOld := 0, 0
		var newRev int64
		for i, k := range o.keys {
			got, ok := actual[k]
			isOld := ok == o.baseOK[i] && (!ok || sameWrite(got, o.base[i]))
			if isOld && ok {
				ck.checkMeta("after restart", k, got, o.base[i])
			}
			var isNew bool
			if o.kind == opDelete {
				isNew = !ok
			} else if ok && got.value == o.value && (!o.baseOK[i] || got.mod > o.base[i].mod) {
				isNew = true
				ck.checkMeta("after restart", k, got, putOn(o.base[i], o.baseOK[i], o.value, got.mod))
				if newRev != 0 && got.mod != newRev {
					ck.f.add("Txn atomicity violated", "%s: key %s at mod_revision %d, another key of the same Txn at %d", o, k, got.mod, newRev)
				}
				newRev = got.mod
			}
			switch {
			case isNew:
				nNew++
			case isOld:
				nOld++
			default:
				ck.f.add("in-flight write left a key in a state no write produced", "%s: key %s has %s (present=%v), before the write it was %s (present=%v)", o, k, got, ok, o.base[i], o.baseOK[i])
			}
		}
		if nNew > 0 && nOld > 0 {
			ck.f.add("Txn atomicity violated", "%s: %d of its %d keys written, %d not", o, nNew, len(o.keys), nOld)
		}
		if nNew == len(o.keys) {
			applied++
			o.applied = true
			if o.kind == opDelete {
				ck.unboundDeletes[o.keys[0]] = o
			} else {
				o.rev = newRev
				ck.record(o, 0, "in-flight")
			}
		}
	}

	// Every other key: exactly what its writer was last acknowledged.
	for k := range keys {
		if ck.pending[k] != nil {
			continue
		}
		want, wok := expected[k]
		got, gok := actual[k]
		switch {
		case wok && !gok:
			ck.f.add("acknowledged write lost", "%s: key %s missing, acknowledged %s", label, k, want)
		case !wok && gok && owner[k] == nil && !ck.everDeleted(k):
			ck.f.add("key present that no acknowledged write created", "%s: key %s has %s", label, k, got)
		case !wok && gok:
			ck.f.add("acknowledged delete lost", "%s: key %s has %s, but its delete was acknowledged", label, k, got)
		case wok && got.value != want.value:
			ck.f.add("acknowledged write lost", "%s: key %s has %s, acknowledged %s", label, k, got, want)
		case wok && got.mod != want.mod:
			ck.f.add("acknowledged revision is not the stored write's revision", "%s: key %s has the acknowledged value %s at mod_revision %d, acknowledged at revision %d", label, k, quoteVal(got.value), got.mod, want.mod)
		case wok:
			ck.checkMeta(label, k, got, want)
		}
	}

	// Resync every writer's view to the store.
	for _, w := range writers {
		for k := range w.state {
			delete(w.state, k)
		}
	}
	byID := map[string]*writer{}
	for _, w := range writers {
		byID[fmt.Sprintf("%sw%02d/", prefix, w.id)] = w
	}
	for k, s := range actual {
		if len(k) >= len(prefix)+4 {
			if w := byID[k[:len(prefix)+4]]; w != nil {
				w.state[k] = s
			}
		}
	}
	ck.pending = map[string]*op{}
	return rev0, actual, applied
}

// sameWrite reports whether a and b are the same write of a key.
func sameWrite(a, b kvState) bool { return a.value == b.value && a.mod == b.mod }

// checkMeta checks create_revision and version of a key whose write is right.
func (ck *checker) checkMeta(where, k string, got, want kvState) {
	if got.create != want.create {
		ck.f.add("wrong create_revision", "%s: key %s has %s, want create_revision %d", where, k, got, want.create)
	}
	if got.version != want.version {
		ck.f.add("wrong version", "%s: key %s has %s, want version %d", where, k, got, want.version)
	}
}

// everDeleted reports whether an acknowledged delete of k is in the ledger.
func (ck *checker) everDeleted(k string) bool {
	for _, o := range ck.ledger {
		if o.kind == opDelete && o.keys[0] == k {
			return true
		}
	}
	return false
}

// catchUp waits until the watcher has been sent everything up to rev0.
func (ck *checker) catchUp(t *testing.T, cli *clientv3.Client, w *watcher, rev0 int64, label string) bool {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		w.mu.Lock()
		last, prog, probs := w.lastRev, w.progressRev, slices.Clone(w.problems)
		w.mu.Unlock()
		for _, p := range probs {
			ck.f.add("watch ended by the server", "%s: %s", label, p)
		}
		if len(probs) > 0 {
			return false
		}
		if last >= rev0 || prog >= rev0 || ck.lastRev >= rev0 {
			ck.processEvents(w.take())
			if ck.lastRev < rev0 {
				ck.f.add("watch gap", "%s: a progress notification promised every event up to %d, but the last event was at %d (the test makes every write under %s)", label, rev0, ck.lastRev, prefix)
			}
			return true
		}
		if time.Now().After(deadline) {
			ck.processEvents(w.take())
			ck.f.add("watch did not catch up", "%s: store at revision %d, watch resumed at %d reached only %d (progress %d) in 15s", label, rev0, ck.lastRev+1, last, prog)
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = cli.RequestProgress(ctx)
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
}

// processEvents checks events in arrival order and applies them to the
// watch-implied state.
func (ck *checker) processEvents(evs []evRec) {
	for _, ev := range evs {
		ck.events++
		rev := ev.mod
		switch {
		case rev < ck.lastRev || (rev == ck.lastRev && ck.revKeys[ev.key]):
			ck.f.add("watch event out of order or duplicated", "event %s %s at revision %d arrived after revision %d", ev.typ, ev.key, rev, ck.lastRev)
		case rev > ck.lastRev+1:
			ck.f.add("watch gap", "no event for revisions %d..%d (the test makes every write under %s); next was %s %s at %d", ck.lastRev+1, rev-1, prefix, ev.typ, ev.key, rev)
		}
		if rev > ck.lastRev {
			ck.lastRev = rev
			ck.revKeys = map[string]bool{}
		}
		ck.revKeys[ev.key] = true
		sk := seenKey(rev, ev.key)
		ck.seen[sk]++

		o := ck.ledger[rev]
		if o == nil && ev.typ == mvccpb.DELETE {
			if d := ck.unboundDeletes[ev.key]; d != nil {
				delete(ck.unboundDeletes, ev.key)
				d.rev = rev
				ck.record(d, 0, "in-flight")
				o = d
			}
		}
		switch {
		case o == nil:
			ck.f.add("watch event for a write that is not in the store", "%s %s value %s at revision %d: no acknowledged or recovered write has that revision", ev.typ, ev.key, quoteVal(ev.value), rev)
		case !slices.Contains(o.keys, ev.key) || (ev.typ == mvccpb.DELETE) != (o.kind == opDelete) || (ev.typ == mvccpb.PUT && ev.value != o.value):
			ck.f.add("watch event does not match the write at its revision", "%s %s value %s at revision %d, but that revision is %s", ev.typ, ev.key, quoteVal(ev.value), rev, o)
		}

		old, had := ck.watchState[ev.key]
		if ev.typ == mvccpb.DELETE || had {
			switch {
			case !ev.hasPrev:
				ck.f.add("watch event without prev_kv", "%s %s at revision %d has no prev_kv (previous mod_revision %d)", ev.typ, ev.key, rev, old.mod)
			case !had:
				ck.f.add("watch event for a key the stream never created", "%s %s at revision %d, prev_kv mod_revision %d", ev.typ, ev.key, rev, ev.prevMod)
			case ev.prevMod != old.mod || ev.prevValue != old.value || ev.prevVersion != old.version:
				ck.f.add("watch event with wrong prev_kv", "%s %s at revision %d: prev_kv mod_revision %d version %d value %s, stream had %s", ev.typ, ev.key, rev, ev.prevMod, ev.prevVersion, quoteVal(ev.prevValue), old)
			}
		}
		if ev.typ == mvccpb.DELETE {
			delete(ck.watchState, ev.key)
			continue
		}
		got := kvState{ev.value, ev.mod, ev.create, ev.version}
		ck.checkMeta(fmt.Sprintf("watch event PUT at revision %d", rev), ev.key, got, putOn(old, had, ev.value, rev))
		ck.watchState[ev.key] = got
	}
}

// checkCoverage checks that every write at or below rev0 came through the
// watch exactly once per key.
func (ck *checker) checkCoverage(rev0 int64, label string) {
	for rev, o := range ck.ledger {
		if o.watchChecked || rev > rev0 || rev <= ck.initRev {
			continue
		}
		o.watchChecked = true
		for _, k := range o.keys {
			if n := ck.seen[seenKey(rev, k)]; n != 1 {
				ck.f.add("write not seen exactly once by the watch", "%s: %s at revision %d: %d events for key %s", label, o, rev, n, k)
			}
		}
	}
	for k, d := range ck.unboundDeletes {
		ck.f.add("recovered delete without a watch event", "%s: %s took effect, but no DELETE event for %s was sent", label, d, k)
		delete(ck.unboundDeletes, k)
	}
}

// compareState checks the watch-implied state against Range, then resyncs
// it so one difference is reported once.
func (ck *checker) compareState(actual map[string]kvState, label string) {
	for k, got := range actual {
		if ws, ok := ck.watchState[k]; !ok {
			ck.f.add("Range and watch disagree", "%s: Range has %s with %s, the watch stream implies no such key", label, k, got)
		} else if ws != got {
			ck.f.add("Range and watch disagree", "%s: Range has %s with %s, the watch stream implies %s", label, k, got, ws)
		}
	}
	for k, ws := range ck.watchState {
		if _, ok := actual[k]; !ok {
			ck.f.add("Range and watch disagree", "%s: the watch stream implies %s with %s, Range has no such key", label, k, ws)
		}
	}
	ck.watchState = map[string]kvState{}
	for k, s := range actual {
		ck.watchState[k] = s
	}
}
