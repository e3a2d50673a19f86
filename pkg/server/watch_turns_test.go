package server

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// gatedStream counts what it sends, each Send waiting for gate to close:
// a client that does not read.
type gatedStream struct {
	pb.Watch_WatchServer
	gate chan struct{}
	sent atomic.Int32
}

func (g *gatedStream) Send(*pb.WatchResponse) error {
	<-g.gate
	g.sent.Add(1)
	return nil
}

// TestDeliverInTurn: streams deliver one at a time when the server has one
// turn, and one whose client stops reading holds the others back for the
// turn's wait at most, once: not again at their next delivery.
func TestDeliverInTurn(t *testing.T) {
	for _, tc := range []struct {
		name string
		// free lets the first stream's client read again, or leaves it
		// stalled past the wait.
		free bool
	}{{name: "first stream's client reads again", free: true}, {name: "first stream's client stalled"}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &fakeBackend{events: func(from, to int64) ([]*mvcc.Event, error) {
					return []*mvcc.Event{putEv("a", from, nil)}, nil
				}}
				s := New(Config{Backend: b})
				s.turns = &turns{slots: make(chan struct{}, 1), wait: time.Minute, held: map[*watchStream]time.Time{}}
				var gs [2]*gatedStream
				var sts [2]*watchStream
				for i := range gs {
					gs[i] = &gatedStream{gate: make(chan struct{})}
					sts[i] = &watchStream{s: s, stream: gs[i], watchers: map[int64]*watcher{1: {id: 1, next: 1, kr: mvcc.NewKeyRange([]byte("a"), nil)}}, follow: &fakeFollower{}}
				}
				close(gs[1].gate)
				deliver := func(st *watchStream, done chan<- struct{}) {
					defer close(done)
					if _, err := st.deliverInTurn(t.Context(), 1); err != nil {
						t.Error(err)
					}
				}
				done0, done1 := make(chan struct{}), make(chan struct{})
				go deliver(sts[0], done0)
				synctest.Wait() // the first stream in its Send, holding the turn
				go deliver(sts[1], done1)
				synctest.Wait()
				if n := gs[1].sent.Load(); n != 0 {
					t.Fatalf("the second stream sent %d responses while the first held the only turn", n)
				}
				if tc.free {
					close(gs[0].gate)
				} else {
					time.Sleep(s.turns.wait)
				}
				<-done1
				if n := gs[1].sent.Load(); n != 1 {
					t.Fatalf("the second stream sent %d responses, want 1", n)
				}
				if !tc.free {
					// Still stalled: the second stream's next delivery
					// does not wait for the turn again.
					start := time.Now()
					again := make(chan struct{})
					go func() {
						defer close(again)
						if _, err := sts[1].deliverInTurn(t.Context(), 2); err != nil {
							t.Error(err)
						}
					}()
					<-again
					if waited := time.Since(start); waited != 0 {
						t.Fatalf("the second stream waited %v again for a turn held by a stalled stream", waited)
					}
					if n := gs[1].sent.Load(); n != 2 {
						t.Fatalf("the second stream sent %d responses, want 2", n)
					}
					close(gs[0].gate)
				}
				<-done0
				if len(s.turns.slots) != 0 {
					t.Fatalf("%d turns not given back", len(s.turns.slots))
				}
			})
		})
	}
}
