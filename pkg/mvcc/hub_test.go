package mvcc

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ev is a put of key at rev whose Size is exactly size bytes.
func ev(rev int64, key string, size int) *Event {
	e := &Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
	e.Kv.Value = []byte(strings.Repeat("v", size-e.Size()))
	return e
}

// revsOf lists the events as "rev:key".
func revsOf(evs []*Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%s", e.Rev(), e.Kv.Key)
	}
	return b.String()
}

func TestHubTrimsWholeRevisions(t *testing.T) {
	type publish struct {
		rev   int64
		evs   []*Event
		after time.Duration // the clock moves by this much before it
	}
	for _, tc := range []struct {
		name     string
		maxBytes int
		publish  []publish
		base     int64  // what the ring no longer holds: revisions <= base
		held     string // every event still in the ring
		over     bool   // a revision larger than the ring is held past the limit
	}{
		{
			name:     "under the limit keeps everything",
			maxBytes: 1000,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {3, []*Event{ev(3, "b", 100), ev(3, "c", 100)}, 0}},
			base:     1,
			held:     "2:a 3:b 3:c",
		},
		{
			name:     "exactly at the limit keeps everything",
			maxBytes: 300,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {3, []*Event{ev(3, "b", 100), ev(3, "c", 100)}, 0}},
			base:     1,
			held:     "2:a 3:b 3:c",
		},
		{
			name:     "over the limit drops the oldest revision",
			maxBytes: 300,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {3, []*Event{ev(3, "b", 100), ev(3, "c", 100)}, 0}, {4, []*Event{ev(4, "d", 100)}, 0}},
			base:     2,
			held:     "3:b 3:c 4:d",
		},
		{
			// Dropping revision 2's first event alone would fit, but a
			// revision is never split: all of it goes.
			name:     "a revision goes whole",
			maxBytes: 350,
			publish:  []publish{{2, []*Event{ev(2, "a", 100), ev(2, "b", 100)}, 0}, {3, []*Event{ev(3, "c", 100), ev(3, "d", 100)}, 0}},
			base:     2,
			held:     "3:c 3:d",
		},
		{
			name:     "several revisions go at once",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {3, []*Event{ev(3, "b", 100)}, 0}, {4, []*Event{ev(4, "c", 200)}, 0}},
			base:     3,
			held:     "4:c",
		},
		{
			// Its watchers read it from the ring, not every row back
			// from the log.
			name:     "a revision larger than the ring stays in it for a while",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {3, []*Event{ev(3, "b", 200), ev(3, "c", 200)}, 0}},
			base:     1,
			held:     "2:a 3:b 3:c",
			over:     true,
		},
		{
			// A watcher a few revisions behind reads it from the ring too.
			name:     "a revision larger than the ring does not count against it for a while",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {3, []*Event{ev(3, "b", 100)}, 0}, {4, []*Event{ev(4, "c", 300)}, 0}, {5, []*Event{ev(5, "d", 100)}, 0}},
			base:     2,
			held:     "3:b 4:c 5:d",
			over:     true,
		},
		{
			name:     "revisions after a large one are kept while it is",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 200), ev(2, "b", 200)}, 0}, {3, []*Event{ev(3, "c", 100)}, hubHold - time.Millisecond}},
			base:     1,
			held:     "2:a 2:b 3:c",
			over:     true,
		},
		{
			name:     "a revision larger than the ring goes at the first publish after its time",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 200), ev(2, "b", 200)}, 0}, {3, []*Event{ev(3, "c", 100)}, hubHold}},
			base:     2,
			held:     "3:c",
		},
		{
			name:     "a revision larger than the ring goes whole at once after its time",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 200), ev(2, "b", 200)}, 0}, {3, []*Event{ev(3, "c", 300)}, hubHold}, {4, []*Event{ev(4, "d", 100)}, hubHold}},
			base:     3,
			held:     "4:d",
		},
		{
			// The tailer publishes what it read back from the log, many
			// revisions at once: only one of them larger than the ring is
			// held, not all of them together.
			name:     "revisions published together are not held as one",
			maxBytes: 250,
			publish:  []publish{{4, []*Event{ev(2, "a", 100), ev(3, "b", 100), ev(4, "c", 100)}, 0}},
			base:     2,
			held:     "3:b 4:c",
		},
		{
			name:     "the last of revisions published together is held when larger than the ring",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 200)}, 0}, {4, []*Event{ev(3, "b", 100), ev(4, "c", 200), ev(4, "d", 200)}, 0}},
			base:     2,
			held:     "3:b 4:c 4:d",
			over:     true,
		},
		{
			// A batch whose first request was a big DeleteRange and whose
			// others, queued behind it, each made a small revision.
			name:     "a revision larger than the ring is held though smaller ones follow it in the same publish",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {4, []*Event{ev(3, "b", 200), ev(3, "c", 200), ev(4, "d", 100)}, 0}},
			base:     1,
			held:     "2:a 3:b 3:c 4:d",
			over:     true,
		},
		{
			name:     "and goes after its time",
			maxBytes: 250,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {4, []*Event{ev(3, "b", 200), ev(3, "c", 200), ev(4, "d", 100)}, 0}, {5, []*Event{ev(5, "e", 100)}, hubHold}},
			base:     3,
			held:     "4:d 5:e",
		},
		{
			// Revisions that changed nothing the ring holds (a lease
			// grant) still move its revision.
			name:     "a revision without events",
			maxBytes: 1000,
			publish:  []publish{{2, []*Event{ev(2, "a", 100)}, 0}, {3, nil, 0}},
			base:     1,
			held:     "2:a",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(1, tc.maxBytes, tc.maxBytes, nil)
			// A hold's timer must not outlive the case.
			t.Cleanup(h.close)
			now := time.Unix(1000, 0)
			h.now = func() time.Time { return now }
			var last int64
			published, dropped := 0, 0
			for _, p := range tc.publish {
				now = now.Add(p.after)
				dropped += h.publish(p.rev, p.evs)
				for _, e := range p.evs {
					published += e.Size()
				}
				last = p.rev
			}
			if published-dropped != h.bytes {
				t.Errorf("published %d bytes, reported %d dropped, holds %d", published, dropped, h.bytes)
			}
			if rev, _, _ := h.state(); rev != last {
				t.Fatalf("state revision %d, want %d", rev, last)
			}
			if h.base != tc.base {
				t.Errorf("base %d, want %d", h.base, tc.base)
			}
			if got := revsOf(h.events); got != tc.held {
				t.Errorf("ring holds %q, want %q", got, tc.held)
			}
			size := 0
			for _, e := range h.events {
				size += e.Size()
			}
			if h.bytes != size || size > tc.maxBytes != tc.over {
				t.Errorf("ring counts %d bytes, holds %d, limit %d", h.bytes, size, tc.maxBytes)
			}
			// Everything above base reads from the ring; base itself does not.
			if _, ok := h.read(tc.base+1, last, fromKey("")); !ok {
				t.Errorf("read from %d: not in the ring", tc.base+1)
			}
			if evs, ok := h.read(tc.base, last, fromKey("")); ok {
				t.Errorf("read from base %d answered %q from the ring", tc.base, revsOf(evs))
			}
		})
	}
}

func TestHubRead(t *testing.T) {
	h := newHub(1, 1<<20, 1<<20, time.Now)
	h.publish(2, []*Event{ev(2, "a", 100), ev(2, "b", 100)})
	h.publish(3, []*Event{ev(3, "c", 100)})
	h.publish(5, []*Event{ev(5, "a", 100), ev(5, "bb", 100), ev(5, "d", 100)})
	h.publish(6, []*Event{ev(6, "b", 100)})
	for _, tc := range []struct {
		from, to int64
		kr       KeyRange
		ok       bool
		want     string
	}{
		{from: 2, to: 6, kr: fromKey(""), ok: true, want: "2:a 2:b 3:c 5:a 5:bb 5:d 6:b"},
		{from: 3, to: 5, kr: fromKey(""), ok: true, want: "3:c 5:a 5:bb 5:d"},
		{from: 4, to: 4, kr: fromKey(""), ok: true, want: ""},
		{from: 4, to: 6, kr: fromKey(""), ok: true, want: "5:a 5:bb 5:d 6:b"},
		{from: 7, to: 9, kr: fromKey(""), ok: true, want: ""},
		{from: 2, to: 6, kr: single("b"), ok: true, want: "2:b 6:b"},
		{from: 2, to: 6, kr: span("b", "c"), ok: true, want: "2:b 5:bb 6:b"},
		{from: 2, to: 6, kr: fromKey("c"), ok: true, want: "3:c 5:d"},
		{from: 2, to: 6, kr: span("x", "y"), ok: true, want: ""},
		{from: 3, to: 6, kr: span("d", "a"), ok: true, want: ""},
		// At or below base the ring cannot know what it lacks.
		{from: 1, to: 6, kr: fromKey(""), ok: false},
		{from: 0, to: 6, kr: fromKey(""), ok: false},
	} {
		got, ok := h.read(tc.from, tc.to, tc.kr)
		if ok != tc.ok || revsOf(got) != tc.want {
			t.Errorf("read(%d, %d, %s) = %q, %v; want %q, %v", tc.from, tc.to, fmtRange(tc.kr), revsOf(got), ok, tc.want, tc.ok)
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestHubWakes(t *testing.T) {
	h := newHub(4, 1<<20, 1<<20, time.Now)
	rev, wake, closed := h.state()
	if rev != 4 || closed || isClosed(wake) {
		t.Fatalf("new hub: rev %d closed %v woken %v", rev, closed, isClosed(wake))
	}

	h.publish(5, []*Event{ev(5, "a", 100)})
	if !isClosed(wake) {
		t.Fatal("publish did not wake the earlier state's waiters")
	}
	rev, wake2, closed := h.state()
	if rev != 5 || closed || isClosed(wake2) {
		t.Fatalf("after publish: rev %d closed %v woken %v", rev, closed, isClosed(wake2))
	}

	h.close()
	if !isClosed(wake2) {
		t.Fatal("close did not wake the waiters")
	}
	if rev, _, closed := h.state(); rev != 5 || !closed {
		t.Fatalf("after close: rev %d closed %v", rev, closed)
	}
	h.close() // a second close is harmless
}

// ringOf is what h holds, read under its lock (its timer changes it).
func ringOf(h *hub) (held string, base int64, bytes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return revsOf(h.events), h.base, h.bytes
}

// A revision larger than the ring leaves it when its hold ends, with no
// publish after it: a store that goes quiet after a big DeleteRange does
// not keep its events, and the store learns what went.
func TestHubHoldEndsWithoutAPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(1, 250, 250, time.Now)
		expired := make(chan int, 2)
		h.onExpire = func(dropped int) { expired <- dropped }
		h.publish(2, []*Event{ev(2, "a", 100)})
		h.publish(3, []*Event{ev(3, "b", 200), ev(3, "c", 200)})
		time.Sleep(hubHold - time.Millisecond)
		synctest.Wait()
		if got, _, _ := ringOf(h); got != "2:a 3:b 3:c" || len(expired) != 0 {
			t.Fatalf("before the hold ends the ring holds %q and %d drops were reported, want 2:a 3:b 3:c and none", got, len(expired))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got, base, n := ringOf(h); got != "" || base != 3 || n != 0 {
			t.Fatalf("after the hold the ring holds %q (%d bytes), base %d; want it empty, base 3", got, n, base)
		}
		if len(expired) != 1 {
			t.Fatalf("%d drops reported, want 1", len(expired))
		}
		if n := <-expired; n != 500 {
			t.Fatalf("reported %d bytes dropped, want 500", n)
		}
		// Watchers behind it read the log now; one at the newest revision
		// still waits in the ring.
		if _, ok := h.read(3, 3, fromKey("")); ok {
			t.Error("revision 3 still reads from the ring")
		}
		if _, ok := h.read(4, 4, fromKey("")); !ok {
			t.Error("revision 4 (not yet published) does not read from the ring")
		}
		h.close()
	})
}

// A hold that a newer large revision replaced does not end the new one
// early, and a closed hub's timer does nothing.
func TestHubHoldRestartsWithALargerRevision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub(1, 250, 250, time.Now)
		h.publish(2, []*Event{ev(2, "a", 300)})
		time.Sleep(hubHold / 2)
		h.publish(3, []*Event{ev(3, "b", 300)})
		time.Sleep(hubHold/2 + time.Millisecond)
		synctest.Wait()
		// Revision 2 went at the publish of 3 (it no longer counted as
		// held); 3 is still held when 2's hold would have ended.
		if got, _, _ := ringOf(h); got != "3:b" {
			t.Fatalf("half a hold after revision 3 the ring holds %q, want 3:b", got)
		}
		h.close()
		time.Sleep(hubHold)
		synctest.Wait()
		if got, _, _ := ringOf(h); got != "3:b" {
			t.Fatalf("a closed hub's ring changed to %q", got)
		}
	})
}

// The ring's clock (Options.Now) decides when a hold ends, not the timer's:
// when it is behind, the hold lasts until it catches up, and then ends
// without a publish.
func TestHubHoldFollowsTheRingsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		ringNow := time.Unix(1_000_000, 0)
		h := newHub(1, 250, 250, func() time.Time { mu.Lock(); defer mu.Unlock(); return ringNow })
		defer h.close()
		h.publish(2, []*Event{ev(2, "a", 300)})
		time.Sleep(2 * hubHold)
		synctest.Wait()
		if got, _, _ := ringOf(h); got != "2:a" {
			t.Fatalf("with the ring's clock still at the publish the ring holds %q, want 2:a", got)
		}
		mu.Lock()
		ringNow = ringNow.Add(hubHold)
		mu.Unlock()
		time.Sleep(hubHold)
		synctest.Wait()
		if got, base, _ := ringOf(h); got != "" || base != 2 {
			t.Fatalf("once the ring's clock passed the hold the ring holds %q, base %d; want it empty, base 2", got, base)
		}
	})
}

// The ring keeps what a follower has not read, up to its bound, and of
// what every follower has read only the newest keepBytes.
func TestHubKeepsWhatFollowersHaveNotRead(t *testing.T) {
	h := newHub(1, 1000, 250, time.Now)
	t.Cleanup(h.close)
	rev := int64(1)
	put := func(n int) {
		for range n {
			rev++
			h.publish(rev, []*Event{ev(rev, "a", 100)})
		}
	}
	check := func(when, want string) {
		t.Helper()
		if got, _, _ := ringOf(h); got != want {
			t.Fatalf("%s: ring holds %q, want %q", when, got, want)
		}
	}

	put(5)
	check("no follower", "5:a 6:a")

	f := h.follow()
	put(2)
	check("a follower that has not said where it stands", "7:a 8:a")

	f.At(9) // it has read up to 8
	put(4)
	check("a follower at 9", "9:a 10:a 11:a 12:a")

	g := h.follow()
	g.At(11)
	f.At(13)
	put(1)
	check("the lower of two followers", "11:a 12:a 13:a")

	put(12)
	check("a follower behind the bound", "16:a 17:a 18:a 19:a 20:a 21:a 22:a 23:a 24:a 25:a")
	if _, ok := h.read(11, 25, fromKey("")); ok {
		t.Fatal("read from 11 answered from the ring after the bound dropped it")
	}

	g.Close()
	f.At(math.MaxInt64)
	put(1)
	check("every follower done", "25:a 26:a")

	rev++
	h.publish(rev, []*Event{ev(rev, "b", 500)})
	check("a newest revision over keepBytes", "27:b")
	put(1)
	check("then an older one", "28:a")
}

// A revision larger than the ring is held, as before, and the revisions
// before it go as keepBytes and the followers say.
func TestHubKeepsWhatFollowersNeedBesideAHold(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	h := newHub(1, 1000, 250, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	t.Cleanup(h.close)
	f := h.follow()
	f.At(2)
	for rev := int64(2); rev <= 4; rev++ {
		h.publish(rev, []*Event{ev(rev, "a", 100)})
	}
	h.publish(5, []*Event{ev(5, "big", 1500)})
	h.publish(6, []*Event{ev(6, "a", 100)})
	if got, _, _ := ringOf(h); got != "2:a 3:a 4:a 5:big 6:a" {
		t.Fatalf("with a follower at 2, ring holds %q", got)
	}
	f.At(5)
	h.publish(7, []*Event{ev(7, "a", 100)})
	if got, _, _ := ringOf(h); got != "5:big 6:a 7:a" {
		t.Fatalf("with the follower at 5 during the hold, ring holds %q", got)
	}
	mu.Lock()
	now = now.Add(2 * hubHold)
	mu.Unlock()
	h.publish(8, []*Event{ev(8, "a", 100)})
	if got, _, _ := ringOf(h); got != "6:a 7:a 8:a" {
		t.Fatalf("after the hold, with the follower at 5, ring holds %q", got)
	}
}
