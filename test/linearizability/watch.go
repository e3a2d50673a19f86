package linearizability

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one watch event as received.
type Event struct {
	Delete bool
	KV     KV  // for a delete: the key and its revision
	Prev   *KV // prev_kv (nil: none sent)
}

func (e Event) String() string {
	s := "PUT " + e.KV.String()
	if e.Delete {
		s = fmt.Sprintf("DELETE %s@%d", e.KV.Key, e.KV.ModRev)
	}
	if e.Prev != nil {
		s += " prev " + e.Prev.String()
	}
	return s
}

// WatchResponse is one response as the client delivered it (fragments
// joined, created responses consumed by the client).
type WatchResponse struct {
	Time     int64 // when it arrived, since the run started
	Rev      int64 // header revision
	Progress bool
	Canceled bool
	Err      string
	Events   []Event
}

// WatchLog is what one watcher received, in order.
type WatchLog struct {
	Endpoint  int
	From      int64 // the revision the watch started at
	Responses []WatchResponse
	// Reached is the highest revision the watcher was known to have
	// received everything up to when it was stopped (an event's or a
	// progress notification's).
	Reached int64
}

// Events are every event the watcher received, in order.
func (w *WatchLog) Events() []Event {
	var out []Event
	for _, r := range w.Responses {
		out = append(out, r.Events...)
	}
	return out
}

// watcher watches Prefix on one endpoint for a run, asking for progress
// every progressEvery so that it can tell how far it got when the
// workload stops. The etcd client resumes the watch by itself after a
// server restart, from the revision after the last one it delivered.
type watcher struct {
	r      *Recorder
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	log WatchLog
}

const progressEvery = 250 * time.Millisecond

func startWatcher(r *Recorder, cli *clientv3.Client, endpoint int, from int64) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{r: r, cli: cli, cancel: cancel, done: make(chan struct{}), log: WatchLog{Endpoint: endpoint, From: from}}
	wch := cli.Watch(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())
	go func() {
		defer close(w.done)
		for resp := range wch {
			wr := WatchResponse{Time: r.now(), Rev: resp.Header.Revision, Progress: resp.IsProgressNotify(), Canceled: resp.Canceled}
			if err := resp.Err(); err != nil {
				wr.Err = err.Error()
			}
			for _, ev := range resp.Events {
				e := Event{Delete: ev.Type == mvccpb.DELETE, KV: toKV(ev.Kv)}
				if ev.PrevKv != nil {
					p := toKV(ev.PrevKv)
					e.Prev = &p
				}
				wr.Events = append(wr.Events, e)
			}
			w.mu.Lock()
			w.log.Responses = append(w.log.Responses, wr)
			w.mu.Unlock()
		}
	}()
	go func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				_ = cli.RequestProgress(pctx)
				pcancel()
			}
		}
	}()
	return w
}

// reached is the highest revision a watcher that received rs has received
// everything up to, as far as it can tell.
func reached(rs []WatchResponse) int64 {
	var rev int64
	for _, r := range rs {
		if r.Progress {
			rev = max(rev, r.Rev)
		}
		for _, e := range r.Events {
			rev = max(rev, e.KV.ModRev)
		}
	}
	return rev
}

func (w *watcher) reached() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return reached(w.log.Responses)
}

// follow waits (up to 30 s) until the watcher has received everything up
// to rev, stops it and returns its log.
func (w *watcher) follow(ctx context.Context, rev int64) *WatchLog {
	deadline := time.Now().Add(30 * time.Second)
	for w.reached() < rev && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	log := w.log
	log.Responses = append([]WatchResponse(nil), w.log.Responses...)
	log.Reached = reached(log.Responses)
	return &log
}
