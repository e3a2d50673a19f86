package linearizability

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// quick is the size of a run in make test: enough concurrency and writes
// for every kind of operation to interleave, small enough to take seconds.
var quick = Config{Clients: 6, OpsPerClient: 150}

// record runs the workload on x to the end and returns its history.
func record(t *testing.T, x *framework.Target, cfg Config) *History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg.Endpoints, cfg.TLS = x.Endpoints(), x.ClientTLS()
	cfg.Seed = uint64(time.Now().UnixNano())
	r, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The clients stop by themselves after their operations.
	for r.Ops() < cfg.Clients*cfg.OpsPerClient*9/10 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	h, err := r.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d: %d operations, final revision %d", cfg.Seed, len(h.Ops), h.Final)
	return h
}

// mustPass checks h and fails t on any violation.
func mustPass(t *testing.T, h *History) *Report {
	t.Helper()
	rep := Check(h)
	t.Logf("%d operations checked (%d acknowledged writes, %d unknown, %d of them resolved by the watch), %d watch events, porcupine %v",
		rep.Ops, rep.Acked, rep.Unknown, rep.Resolved, rep.Events, rep.CheckTime.Round(time.Millisecond))
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	if rep.Acked < 100 || rep.Events < 100 {
		t.Errorf("only %d acknowledged writes and %d watch events: the run tested little", rep.Acked, rep.Events)
	}
	return rep
}

// TestLinearizable records a run on each backend and checks it: QuantyKube
// on SQLite, two QuantyKube replicas on one PostgreSQL database and two on
// one MariaDB database (clients and watchers spread over both), and etcd
// itself, which shows the checker does not flag what etcd does.
func TestLinearizable(t *testing.T) {
	framework.Run(t, framework.All, func(t *testing.T, b framework.Backend) {
		t.Parallel()
		o := framework.Options{}
		if b.IsShared() {
			o = framework.Options{Process: true, Replicas: 2}
		}
		x := framework.Start(t, b, o)
		h := record(t, x, quick)
		mustPass(t, h)
		if n, lost, err := Lost(t.Context(), x.Client(t), h); err != nil || n != 0 {
			t.Fatalf("%d writes lost (%v): %q", n, err, lost)
		}
	})
}

// TestCheckerCatches records a correct run, then shows that the checks
// find what is injected into it: a stale read, an acknowledged write whose
// revision the store reused, and each kind of watch fault.
func TestCheckerCatches(t *testing.T) {
	x := framework.Start(t, framework.SQLite, framework.Options{})
	h := record(t, x, quick)
	mustPass(t, h)
	cli := x.Client(t)
	if n, lost, err := Lost(t.Context(), cli, h); err != nil || n != 0 {
		t.Fatalf("%d writes lost (%v): %q", n, err, lost)
	}
	t.Run("lost write", func(t *testing.T) {
		// An acknowledged put the store does not have at its revision.
		c := clone(h)
		for i, op := range c.Ops {
			if op.Req.Kind == Put && !op.Resp.Unknown {
				c.Ops[i].Req.Value = "never written"
				break
			}
		}
		n, lost, err := Lost(t.Context(), cli, c)
		if err != nil || n != 1 {
			t.Fatalf("%d writes lost (%v): %q", n, err, lost)
		}
		t.Logf("caught: %s", lost[0])
	})

	for _, tc := range []struct {
		name   string
		inject func(t *testing.T, h *History)
		want   string // in a violation
	}{
		{"stale read", injectStaleRead, "not linearizable"},
		{"revision reused", func(t *testing.T, h *History) {
			// Two acknowledged puts answered with the same revision.
			var puts []int
			for i, op := range h.Ops {
				if op.Req.Kind == Put && !op.Resp.Unknown {
					puts = append(puts, i)
				}
			}
			h.Ops[puts[len(puts)-1]].Resp.Rev = h.Ops[puts[0]].Resp.Rev
		}, "given to two writes"},
		{"watch gap", func(t *testing.T, h *History) {
			w := h.Watches[0]
			i := eventResponse(t, w, len(w.Responses)/2)
			w.Responses = slices.Delete(w.Responses, i, i+1)
		}, "gap"},
		{"duplicate event", func(t *testing.T, h *History) {
			w := h.Watches[0]
			i := eventResponse(t, w, len(w.Responses)/2)
			w.Responses = slices.Insert(w.Responses, i+1, w.Responses[i])
		}, "received twice"},
		{"events out of order", func(t *testing.T, h *History) {
			// Two event responses in a row: with a progress notification
			// between them, the earlier events would come after it, and
			// the checker would name that first.
			w := h.Watches[0]
			for i := eventResponse(t, w, len(w.Responses)/2); i+1 < len(w.Responses); i = eventResponse(t, w, i+1) {
				if len(w.Responses[i+1].Events) > 0 {
					w.Responses[i], w.Responses[i+1] = w.Responses[i+1], w.Responses[i]
					return
				}
			}
			t.Fatal("no two event responses in a row")
		}, "out of order"},
		{"wrong prev_kv", func(t *testing.T, h *History) {
			w := h.Watches[0]
			for i := len(w.Responses) / 2; i < len(w.Responses); i++ {
				for j, e := range w.Responses[i].Events {
					if e.Prev != nil {
						p := *e.Prev
						p.ModRev--
						w.Responses[i].Events[j].Prev = &p
						return
					}
				}
			}
			t.Fatal("no event with prev_kv")
		}, "prev_kv wrong"},
		{"progress ahead of events", func(t *testing.T, h *History) {
			w := h.Watches[0]
			i := eventResponse(t, w, len(w.Responses)/2)
			w.Responses = slices.Insert(w.Responses, i, WatchResponse{Progress: true, Rev: w.Responses[i].Events[0].KV.ModRev})
		}, "after a progress notification"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clone(h)
			tc.inject(t, c)
			rep := Check(c)
			for _, v := range rep.Violations {
				if strings.Contains(v, tc.want) {
					t.Logf("caught: %s", v)
					return
				}
			}
			t.Fatalf("no violation mentions %q; found %q", tc.want, rep.Violations)
		})
	}
}

// injectStaleRead makes a Get answer what an earlier Get of the same key
// answered although a write acknowledged between them moved the store on.
func injectStaleRead(t *testing.T, h *History) {
	for j, g2 := range h.Ops {
		if g2.Req.Kind != Get {
			continue
		}
		for _, g1 := range h.Ops {
			if g1.Req.Kind != Get || g1.Req.Key != g2.Req.Key || g1.Return >= g2.Call || g1.Resp.Rev >= g2.Resp.Rev {
				continue
			}
			for _, w := range h.Ops {
				if w.Req.Kind.writes() && !w.Resp.Unknown && changed(&w) && w.Req.Key == g2.Req.Key &&
					w.Resp.Rev > g1.Resp.Rev && w.Resp.Rev <= g2.Resp.Rev && w.Return < g2.Call {
					t.Logf("%v now answers as %v did, before %v", g2, g1, w)
					h.Ops[j].Resp = g1.Resp
					return
				}
			}
		}
	}
	t.Fatal("no read to make stale")
}

// eventResponse is the index of the first response at or after i that
// carries events.
func eventResponse(t *testing.T, w *WatchLog, i int) int {
	for ; i < len(w.Responses); i++ {
		if len(w.Responses[i].Events) > 0 {
			return i
		}
	}
	t.Fatal("no response with events")
	return 0
}

func clone(h *History) *History {
	c := *h
	c.Ops = slices.Clone(h.Ops)
	c.Watches = nil
	for _, w := range h.Watches {
		wc := *w
		wc.Responses = slices.Clone(w.Responses)
		for i := range wc.Responses {
			wc.Responses[i].Events = slices.Clone(wc.Responses[i].Events)
		}
		c.Watches = append(c.Watches, &wc)
	}
	return &c
}
