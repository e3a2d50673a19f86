package linearizability

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Report is the verdict on a history.
type Report struct {
	// Ops is how many operations the linearizability check was given:
	// every one with a known outcome, and every unknown one the watch
	// showed took effect.
	Ops int
	// Acked counts acknowledged writes; Unknown writes whose outcome the
	// client never learnt, Resolved those of them the watch showed took
	// effect (the rest had none, and are left out).
	Acked, Unknown, Resolved int
	// Events counts the events of the first watcher.
	Events int
	// Violations are everything found wrong; empty for a correct store.
	Violations []string
	// CheckTime is how long porcupine took.
	CheckTime time.Duration
}

func (r *Report) add(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// checkTimeout bounds porcupine. A check it cannot finish is a violation:
// the run proved nothing.
const checkTimeout = 3 * time.Minute

// Check judges a history: the watch guarantees on every watcher, the
// acknowledged writes against the watch, and linearizability with
// porcupine against Model.
func Check(h *History) *Report {
	rep := &Report{}
	for _, op := range h.Ops {
		switch {
		case !op.Req.Kind.writes():
		case op.Resp.Unknown:
			rep.Unknown++
		default:
			rep.Acked++
		}
	}
	if len(h.Watches) == 0 {
		rep.add("no watcher recorded the run")
		return rep
	}
	for _, w := range h.Watches {
		checkWatch(rep, h, w)
	}
	checkSameEvents(rep, h.Watches)
	events := h.Watches[0]
	rep.Events = len(events.Events())
	ops := resolve(rep, h, events)
	rep.Ops = len(ops)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(Model(h.Init), ops, checkTimeout)
	rep.CheckTime = time.Since(start)
	switch res {
	case porcupine.Illegal:
		rep.add("not linearizable: %s", explain(h.Init, ops, info))
	case porcupine.Unknown:
		rep.add("the linearizability check did not finish in %v", checkTimeout)
	}
	return rep
}

// checkWatch checks one watcher: it was never cancelled, received every
// revision from where it started to the run's end exactly once, in order,
// each revision in one response, with prev_kv, version and create_revision
// right, and no progress notification ahead of an event still to come.
func checkWatch(rep *Report, h *History, w *WatchLog) {
	name := fmt.Sprintf("watcher of endpoint %d", w.Endpoint)
	if w.Reached < h.Final {
		rep.add("%s: received everything only up to revision %d of %d", name, w.Reached, h.Final)
	}
	state := h.Init
	last, lastResp := w.From-1, -1
	var progress int64
	seen := map[string]bool{} // revision and key of every event
	for i, r := range w.Responses {
		if r.Canceled || r.Err != "" {
			rep.add("%s: response %d cancelled the watch: %s", name, i, r.Err)
		}
		if r.Progress {
			if r.Rev < progress {
				rep.add("%s: progress went back from %d to %d", name, progress, r.Rev)
			}
			progress = max(progress, r.Rev)
			continue
		}
		for _, e := range r.Events {
			rev := e.KV.ModRev
			id := fmt.Sprint(rev, " ", e.KV.Key)
			switch {
			case seen[id]:
				rep.add("%s: event %v received twice", name, e)
			case rev <= progress:
				rep.add("%s: event %v after a progress notification at %d", name, e, progress)
			case rev < last:
				rep.add("%s: event %v after revision %d (out of order)", name, e, last)
			case rev == last && lastResp != i:
				rep.add("%s: revision %d split across responses", name, rev)
			case rev > last+1:
				rep.add("%s: gap: no event for revisions %d..%d (every revision is under %s), next %v", name, last+1, rev-1, Prefix, e)
			}
			if rev > r.Rev {
				rep.add("%s: event at %d in a response whose header says %d", name, rev, r.Rev)
			}
			seen[id] = true
			last, lastResp = max(last, rev), i
			state = replay(rep, name, state, e)
		}
	}
	if last < h.Final && w.Reached >= h.Final {
		rep.add("%s: gap: no event for revisions %d..%d, yet progress reached %d", name, last+1, h.Final, w.Reached)
	}
}

// replay applies e to the state the stream implies, checking that e agrees
// with it.
func replay(rep *Report, name string, s State, e Event) State {
	old, had := s.KVs[e.KV.Key]
	prevOK := (!had && e.Prev == nil) || (had && e.Prev != nil && *e.Prev == old)
	if !prevOK {
		want := "none"
		if had {
			want = old.String()
		}
		rep.add("%s: %v: prev_kv wrong, the stream before it implies %s", name, e, want)
	}
	rev := e.KV.ModRev
	if e.Delete {
		if !had {
			rep.add("%s: %v deletes a key the stream never created", name, e)
		}
		return s.with(max(s.Rev, rev), nil, []string{e.KV.Key})
	}
	want := KV{Key: e.KV.Key, Value: e.KV.Value, ModRev: rev, CreateRev: rev, Version: 1}
	if had {
		want.CreateRev, want.Version = old.CreateRev, old.Version+1
	}
	if e.KV != want {
		rep.add("%s: %v, the stream before it implies %v", name, e, want)
	}
	return s.with(max(s.Rev, rev), &e.KV, nil)
}

// checkSameEvents: every watcher, whichever replica it watched, received
// the same events.
func checkSameEvents(rep *Report, ws []*WatchLog) {
	first := ws[0].Events()
	for _, w := range ws[1:] {
		evs := w.Events()
		for i := range max(len(first), len(evs)) {
			if i >= len(first) || i >= len(evs) || first[i].String() != evs[i].String() {
				a, b := "nothing", "nothing"
				if i < len(first) {
					a = first[i].String()
				}
				if i < len(evs) {
					b = evs[i].String()
				}
				rep.add("watchers of endpoints %d and %d differ at event %d: %s, and %s", ws[0].Endpoint, w.Endpoint, i, a, b)
				break
			}
		}
	}
}

// revision is what a watcher showed of one revision.
type revision struct {
	events []Event
	time   int64 // when the watcher received it
	owner  *Op   // the write that took it
}

// resolve returns the operations for porcupine: every operation with a
// known outcome, and the unknown writes the watch shows took effect, with
// the revision it shows. An unknown write the watch does not show had no
// effect (or never happened) and is left out. It also checks that every
// acknowledged write is in the watch as acknowledged, that no revision
// went to two writes, and that no event lacks a write.
func resolve(rep *Report, h *History, w *WatchLog) []porcupine.Operation {
	revs := map[int64]*revision{}
	putAt := map[string]int64{} // value -> revision of the PUT event that wrote it
	for _, r := range w.Responses {
		for _, e := range r.Events {
			rv := revs[e.KV.ModRev]
			if rv == nil {
				rv = &revision{time: r.Time}
				revs[e.KV.ModRev] = rv
			}
			rv.events = append(rv.events, e)
			if !e.Delete {
				putAt[e.KV.Value] = e.KV.ModRev
			}
		}
	}
	ops := slices.Clone(h.Ops)
	claim := func(op *Op, rev int64) bool {
		rv := revs[rev]
		switch {
		case rv == nil:
			if rev <= w.Reached {
				rep.add("%v: the watch shows nothing at revision %d", op, rev)
			}
			return false
		case rv.owner != nil:
			rep.add("revision %d given to two writes: %v, and %v", rev, rv.owner, op)
			return false
		}
		rv.owner = op
		return true
	}
	var unknownDeletes []*Op
	var out []porcupine.Operation
	add := func(op *Op) {
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: op.Req, Call: op.Call, Output: op.Resp, Return: op.Return})
	}
	for i := range ops {
		op := &ops[i]
		if !op.Req.Kind.writes() {
			add(op)
			continue
		}
		if !op.Resp.Unknown {
			if changed(op) && claim(op, op.Resp.Rev) {
				checkEffect(rep, op, revs[op.Resp.Rev].events)
			}
			add(op)
			continue
		}
		switch op.Req.Kind {
		case Put, Txn:
			rev, ok := putAt[op.Req.Value]
			if !ok {
				continue // no effect
			}
			rep.Resolved++
			op.Resp = Response{Rev: rev, Succeeded: op.Req.Kind == Txn}
			if !claim(op, rev) {
				continue
			}
			// It took effect before the watcher heard of it.
			op.Return = revs[rev].time
			if op.Return < op.Call {
				rep.add("%v: its value was watched at %.3fs, before it was sent", op, float64(op.Return)/1e9)
				continue
			}
			add(op)
		default:
			unknownDeletes = append(unknownDeletes, op)
		}
	}
	// Deletes carry no value of their own: a revision of deletes that no
	// acknowledged write took goes to the earliest unknown delete that
	// could have made it. Choosing the earliest is safe: another delete of
	// the same keys could only have happened later.
	for _, rev := range sortedRevs(revs) {
		rv := revs[rev]
		if rv.owner != nil || !rv.events[0].Delete {
			continue
		}
		var deleted []string
		for _, e := range rv.events {
			deleted = append(deleted, e.KV.Key)
		}
		var pick *Op
		for _, single := range []bool{true, false} {
			for _, op := range unknownDeletes {
				if op.Resp.Unknown && op.Call <= rv.time && deletes(op.Req, deleted, single) && (pick == nil || op.Call < pick.Call) {
					pick = op
				}
			}
			if pick != nil {
				break
			}
		}
		if pick == nil {
			continue
		}
		rep.Resolved++
		pick.Resp, pick.Return = Response{Rev: rev, Deleted: int64(len(deleted))}, rv.time
		claim(pick, rev)
		add(pick)
	}
	for _, rev := range sortedRevs(revs) {
		if rv := revs[rev]; rv.owner == nil {
			rep.add("revision %d: no write of the run explains the watch's %v", rev, rv.events)
		}
	}
	return out
}

func sortedRevs(revs map[int64]*revision) []int64 {
	out := make([]int64, 0, len(revs))
	for r := range revs {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// changed reports whether an acknowledged write took a revision.
func changed(op *Op) bool {
	switch op.Req.Kind {
	case Put:
		return true
	case Txn:
		return op.Resp.Succeeded
	}
	return op.Resp.Deleted > 0
}

// deletes reports whether req could have deleted exactly keys: a delete of
// the one key (single), or a DeleteRange of their group.
func deletes(req Request, keys []string, single bool) bool {
	if single {
		return req.Kind == Delete && len(keys) == 1 && keys[0] == req.Key
	}
	if req.Kind != DeleteRange {
		return false
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, req.Key) {
			return false
		}
	}
	return true
}

// checkEffect checks the watch's events at an acknowledged write's
// revision against the write.
func checkEffect(rep *Report, op *Op, evs []Event) {
	if !effectShown(op, evs) {
		rep.add("acknowledged %v, but the watch shows %v at revision %d", op, evs, op.Resp.Rev)
	}
}

// effectShown reports whether evs, the events of one revision, are what
// the write op made.
func effectShown(op *Op, evs []Event) bool {
	switch op.Req.Kind {
	case Put, Txn:
		return len(evs) == 1 && !evs[0].Delete && evs[0].KV.Key == op.Req.Key && evs[0].KV.Value == op.Req.Value
	case Delete:
		return len(evs) == 1 && evs[0].Delete && evs[0].KV.Key == op.Req.Key
	case DeleteRange:
		ok := int64(len(evs)) == op.Resp.Deleted
		for _, e := range evs {
			ok = ok && e.Delete && strings.HasPrefix(e.KV.Key, op.Req.Key)
		}
		return ok
	}
	return false
}

// explain describes where porcupine got stuck: the longest linearizable
// prefix it found, the state after it, and the earliest operation it could
// not place next.
func explain(init State, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []int
	for _, p := range info.PartialLinearizations() {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	placed := map[int]bool{}
	s := init
	for _, i := range longest {
		placed[i] = true
		s, _ = s.Apply(ops[i].Input.(Request))
	}
	next := -1
	for i := range ops {
		if !placed[i] && (next < 0 || ops[i].Call < ops[next].Call) {
			next = i
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d operations linearize", len(longest), len(ops))
	if n := len(longest); n > 0 {
		last := ops[longest[n-1]]
		fmt.Fprintf(&b, "; the last: client %d %v -> %v", last.ClientId, last.Input, last.Output)
	}
	fmt.Fprintf(&b, "; state then: %v", s)
	if next >= 0 {
		op := ops[next]
		_, want := s.Apply(op.Input.(Request))
		fmt.Fprintf(&b, "; next by call time: client %d %v at %.3fs answered %v, where the state then answers %v",
			op.ClientId, op.Input, float64(op.Call)/1e9, op.Output, want)
	}
	return b.String()
}

// Lost counts the acknowledged writes the store no longer has, with a line
// for each: it reads the store's history of Prefix back with a fresh
// watch from the run's first revision (the events come from what the
// store kept, not from memory) and holds every acknowledged write against
// the events at its revision. It is the durability verdict after crashes
// and power cuts.
func Lost(ctx context.Context, cli *clientv3.Client, h *History) (int, []string, error) {
	head, err := cli.Get(ctx, Prefix+"head")
	if err != nil {
		return 0, nil, fmt.Errorf("linearizability: reading the head revision: %w", err)
	}
	rev := head.Header.Revision
	byRev := map[int64][]Event{}
	if rev > h.Init.Rev {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		wch := cli.Watch(wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(h.Init.Rev+1))
		for last := h.Init.Rev; last < rev; {
			wr, ok := <-wch
			if !ok || wr.Err() != nil || wr.Canceled {
				return 0, nil, fmt.Errorf("linearizability: watching the store's history from %d: ended at %d of %d: %v", h.Init.Rev+1, last, rev, wr.Err())
			}
			for _, ev := range wr.Events {
				e := Event{Delete: ev.Type == mvccpb.DELETE, KV: toKV(ev.Kv)}
				byRev[e.KV.ModRev] = append(byRev[e.KV.ModRev], e)
				last = e.KV.ModRev
			}
		}
	}
	var lost []string
	for _, op := range h.Ops {
		if op.Resp.Unknown || !changed(&op) {
			continue
		}
		switch evs := byRev[op.Resp.Rev]; {
		case op.Resp.Rev > rev:
			lost = append(lost, fmt.Sprintf("acknowledged %v: the store is back at revision %d", op, rev))
		case !effectShown(&op, evs):
			lost = append(lost, fmt.Sprintf("acknowledged %v: the store has %v at revision %d", op, evs, op.Resp.Rev))
		}
	}
	return len(lost), lost, nil
}
