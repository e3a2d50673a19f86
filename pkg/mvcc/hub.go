package mvcc

import (
	"context"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// hub holds the most recent committed events in memory and wakes watchers
// when new ones arrive. Watchers pull: each reads from the ring at its own
// pace, so a slow watcher costs nobody else anything, and one that falls
// behind the ring reads the log table instead.
//
// The ring keeps the events its followers (the watch streams) have not
// read yet, up to maxBytes; while it holds more than its keep in all
// (keepFor, at most keepBytes),
// it drops the revisions every follower has read, the newest aside:
// those are only memory, and a store without a watcher behind would
// otherwise hold maxBytes of them at all times.
type hub struct {
	mu        sync.Mutex
	events    []*Event // in (revision, sub) order
	bytes     int
	maxBytes  int
	keepBytes int // at most maxBytes
	// keepFor, when set, is the keep for now, at most keepBytes (the
	// store's ringKeep); keepBytes when nil.
	keepFor   func() int
	base      int64 // every event with a revision > base is in events
	rev       int64 // newest published revision
	wake      chan struct{}
	closed    bool
	followers map[*follower]struct{}

	// A revision larger than the whole ring (a DeleteRange of many keys)
	// stays in it until holdUntil without counting against its budget:
	// the revisions before it stay as far as maxBytes (and keepBytes,
	// once every follower has read them) allow, those
	// after it with it. The watchers it wakes, even a few revisions
	// behind, read it from memory, where its events already are, instead
	// of reading every row back from the log. Then it counts, and goes
	// when the hold ends (expire) or at the next publish after that.
	now       func() time.Time
	holdRev   int64
	holdBytes int
	holdUntil time.Time
	// A hold ends on a timer, not only at a publish: a store that goes
	// quiet after a big DeleteRange would otherwise keep its events, and
	// with them the deleted values, until its next write. onExpire (set
	// once, before the first publish) learns how many bytes that dropped.
	expiry    *time.Timer
	expiryGen uint64 // the current hold's timer; an earlier one that fires late does nothing
	onExpire  func(dropped int)
}

// hubHold is how long a revision larger than the ring stays in it: long
// enough for the watchers it woke to be scheduled and read it.
const hubHold = time.Second

func newHub(rev int64, maxBytes, keepBytes int, now func() time.Time) *hub {
	return &hub{
		base: rev, rev: rev, maxBytes: maxBytes, keepBytes: min(keepBytes, maxBytes),
		wake: make(chan struct{}), now: now, followers: map[*follower]struct{}{},
	}
}

// follower is a Follower of the ring's events.
type follower struct {
	h    *hub
	next atomic.Int64 // math.MaxInt64 until At
}

func (h *hub) follow() *follower {
	f := &follower{h: h}
	f.next.Store(math.MaxInt64)
	h.mu.Lock()
	h.followers[f] = struct{}{}
	h.mu.Unlock()
	return f
}

func (f *follower) At(rev int64) { f.next.Store(rev) }

func (f *follower) Close() {
	f.h.mu.Lock()
	delete(f.h.followers, f)
	f.h.mu.Unlock()
}

// needed (with mu held) is the oldest revision a follower has not read.
func (h *hub) needed() int64 {
	low := int64(math.MaxInt64)
	for f := range h.followers {
		low = min(low, f.next.Load())
	}
	return low
}

// publish adds a revision's events and reports how many bytes of events
// it dropped to make room.
func (h *hub) publish(rev int64, evs []*Event) (dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Several revisions come at once from a batch of several requests, or
	// from the tailer reading the log back. Each counts alone: the newest
	// that is larger than the ring is held (with those after it), though
	// small ones follow it, as a batch's requests queued behind a big
	// DeleteRange do.
	size, big, bigBytes := 0, int64(0), 0
	for i := 0; i < len(evs); {
		r, n := evs[i].Rev(), 0
		for ; i < len(evs) && evs[i].Rev() == r; i++ {
			n += evs[i].Size()
		}
		size += n
		if n > h.maxBytes {
			big, bigBytes = r, n
		}
	}
	now := h.now()
	if big != 0 {
		h.holdRev, h.holdBytes, h.holdUntil = big, bigBytes, now.Add(hubHold)
		h.armExpiry(hubHold)
	}
	h.bytes += size
	h.events = append(h.events, evs...)
	h.rev = rev
	dropped = h.trim(now)
	close(h.wake)
	h.wake = make(chan struct{})
	return dropped
}

// trim drops whole revisions from the front while the ring holds more
// than maxBytes, or while it holds more than the keep and every follower
// has read the revision, unless it is the newest: a watch that starts
// now, from the revision a list just read, finds it in memory. A held
// revision and those after it stay until now reaches the hold's end. It
// reports the bytes it dropped.
func (h *hub) trim(now time.Time) (dropped int) {
	held := 0
	if now.Before(h.holdUntil) {
		held = h.holdBytes
	}
	needed, keep := h.needed(), h.keepBytes
	if h.keepFor != nil {
		keep = min(keep, h.keepFor())
	}
	drop := 0
	for drop < len(h.events) {
		r := h.events[drop].Rev()
		if held > 0 && r >= h.holdRev {
			break
		}
		if over, spare := h.bytes-held > h.maxBytes, h.bytes-held > keep && r < needed && r < h.rev; !over && !spare {
			break
		}
		for drop < len(h.events) && h.events[drop].Rev() == r {
			dropped += h.events[drop].Size()
			h.bytes -= h.events[drop].Size()
			h.events[drop] = nil
			drop++
		}
		h.base = r
	}
	if drop > 0 {
		h.events = h.events[drop:]
	}
	return dropped
}

// armExpiry (with mu held) starts the current hold's timer, in place of
// any earlier hold's.
func (h *hub) armExpiry(d time.Duration) {
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.expiryGen++
	gen := h.expiryGen
	h.expiry = time.AfterFunc(d, func() { h.expire(gen) })
}

// expire ends hold gen when its time is up by the ring's clock, or waits
// again when that clock is behind the timer's. A held revision that is
// the newest goes too: the watchers still behind it read the log, as they
// would after any publish.
func (h *hub) expire(gen uint64) {
	h.mu.Lock()
	dropped := 0
	switch now := h.now(); {
	case h.closed || gen != h.expiryGen:
		// Closed, or a later hold replaced this one and has its own timer.
	case now.Before(h.holdUntil):
		// Not too often, however slowly that clock moves.
		h.armExpiry(max(h.holdUntil.Sub(now), 10*time.Millisecond))
	default:
		dropped = h.trim(now)
	}
	onExpire := h.onExpire
	h.mu.Unlock()
	if dropped > 0 && onExpire != nil {
		onExpire(dropped)
	}
}

// skip moves the Hub on to rev past revisions whose events are gone (a
// replica that fell behind retention, tail.go): the ring is emptied, so a
// watcher still before rev reads the log, finds the floor, and is
// cancelled as etcd cancels a watch whose revision was compacted.
func (h *hub) skip(rev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev <= h.rev {
		return
	}
	clear(h.events)
	h.events, h.bytes = h.events[:0], 0
	h.holdBytes, h.holdUntil = 0, time.Time{}
	h.base, h.rev = rev, rev
	close(h.wake)
	h.wake = make(chan struct{})
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.wake)
		if h.expiry != nil {
			h.expiry.Stop()
		}
	}
}

// state returns the newest published revision and a channel closed when a
// newer one is published (or the store closes).
func (h *hub) state() (int64, <-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev, h.wake, h.closed
}

// read returns the events with from <= revision <= to that match, or
// ok=false when some of them are older than the ring.
func (h *hub) read(from, to int64, kr KeyRange) ([]*Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if from <= h.base {
		return nil, false
	}
	i := sort.Search(len(h.events), func(i int) bool { return h.events[i].Rev() >= from })
	var out []*Event
	for ; i < len(h.events) && h.events[i].Rev() <= to; i++ {
		if kr.Contains(h.events[i].Kv.Key) {
			out = append(out, h.events[i])
		}
	}
	return out, true
}

// Published is the newest revision watchers can read (WatchableKV).
func (s *Store) Published() (int64, <-chan struct{}, bool) { return s.hub.state() }

// Follow registers a follower of the events (WatchableKV).
func (s *Store) Follow() Follower { return s.hub.follow() }

// Events returns the committed events in [from, through] on keys in kr,
// in revision order, from the ring when it still holds them (all of them:
// they are in memory already) and from the log table otherwise, up to
// the revision that takes them to LogReadBytes (eventsFromLog). Each
// event carries its prev_kv (WatchableKV).
func (s *Store) Events(ctx context.Context, from, to int64, kr KeyRange) ([]*Event, int64, error) {
	if evs, ok := s.hub.read(from, to, kr); ok {
		return evs, to, nil
	}
	metrics.WatchLogReads.Inc()
	return s.eventsFromLog(ctx, from, to, kr)
}
