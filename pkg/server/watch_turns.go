package server

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// turns bounds how many watch streams deliver at once, so that fan-out
// leaves a P to the requests. Delivering to many watchers is CPU work that
// rarely blocks, and the Go runtime looks for network input only when a P
// runs out of work (or from its monitor, every 10 ms): with every P busy
// delivering, a write waits that long at each step between its request and
// its answer, and the next write is sent only after the deliveries of the
// last one, at the fan-out's pace. With a P left free, writes are answered
// while their events wait, and a stream that fell behind sends each of its
// watchers the revisions it missed in one response (deliver), which costs
// less per event than a response per revision.
type turns struct {
	slots chan struct{}
	// wait bounds the wait for a turn: a stream whose client stops reading
	// blocks in Send holding its turn, and must slow the other streams'
	// deliveries, not stop them.
	wait time.Duration

	mu   sync.Mutex
	held map[*watchStream]time.Time // since when each holder has held its turn
}

// turnWait is how long a stream waits for a turn before it delivers anyway.
const turnWait = 100 * time.Millisecond

// newTurns lets GOMAXPROCS-1 streams deliver at once (one on a single P).
func newTurns(wait time.Duration) *turns {
	return &turns{slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)), wait: wait, held: map[*watchStream]time.Time{}}
}

// take waits for a turn for st until the longest holder has held its turn
// for t.wait, or until ctx ends, and reports whether it got one, which the
// caller gives back with give. Waiting is measured from the hold, not from
// the call, so that a stream stalled in Send delays each of the others
// once, not at every delivery while it stays stalled.
func (t *turns) take(ctx context.Context, st *watchStream) bool {
	select {
	case t.slots <- struct{}{}:
		t.hold(st)
		return true
	default:
	}
	wait := t.wait - t.longestHold()
	if wait <= 0 {
		return false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case t.slots <- struct{}{}:
		t.hold(st)
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

func (t *turns) hold(st *watchStream) {
	t.mu.Lock()
	t.held[st] = time.Now()
	t.mu.Unlock()
}

// longestHold is how long the earliest of the current holders has held its
// turn (0 when none is recorded yet).
func (t *turns) longestHold() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var longest time.Duration
	for _, since := range t.held {
		longest = max(longest, time.Since(since))
	}
	return longest
}

func (t *turns) give(st *watchStream) {
	t.mu.Lock()
	delete(t.held, st)
	t.mu.Unlock()
	<-t.slots
}

// deliverInTurn is deliver in one of the server's delivery turns, taken
// only when some watcher has events to be sent.
func (st *watchStream) deliverInTurn(ctx context.Context, rev int64) (bool, error) {
	if !st.pending(rev) {
		return false, nil
	}
	if st.s.turns.take(ctx, st) {
		defer st.s.turns.give(st)
	}
	return st.deliver(ctx, rev)
}
