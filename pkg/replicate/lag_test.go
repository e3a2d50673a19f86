package replicate_test

import (
	"context"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// stalling is a real bucket whose Puts, once stall is closed, wait until
// release is closed: an object store that has stopped answering (test
// /chaos's TestObjectStoreFaults does it to SeaweedFS with a TCP proxy).
type stalling struct {
	objstore.Store
	stall, release chan struct{}
	entered        chan struct{} // a Put is waiting
}

func (s *stalling) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	select {
	case <-s.stall:
		select {
		case s.entered <- struct{}{}:
		default:
		}
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	default:
	}
	return s.Store.Put(ctx, name, r, size)
}

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// While a PUT hangs, the lag gauges go on rising: they are what an
// operator watches, and a step that never ends would otherwise leave
// them at the last step's 0.
func TestReplicateLagWhileAPutHangs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := &stalling{Store: bucket(t, filepath.Join(dir, "bucket")), stall: make(chan struct{}), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(3, 4))
	r := startReplicator(t, path, st)
	defer r.Close()
	revs := workload(t, c, rng, 20)
	waitShipped(t, r, revs[len(revs)-1])

	close(st.stall)
	revs = workload(t, c, rng, 20)
	select {
	case <-st.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no Put in 20 s after writes")
	}
	// The interval is 10 ms: 50 of them waiting is far past any step's end.
	deadline := time.Now().Add(20 * time.Second)
	for gauge(t, metrics.ReplicateLagSeconds) < 0.5 || gauge(t, metrics.ReplicateLagRevisions) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a Put has hung for 20 s, yet the lag gauges say %.3f s and %.0f revisions", gauge(t, metrics.ReplicateLagSeconds), gauge(t, metrics.ReplicateLagRevisions))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := r.Status(); s.Shipped >= revs[len(revs)-1] {
		t.Fatalf("shipped %d through a hung Put", s.Shipped)
	}

	close(st.release)
	waitShipped(t, r, revs[len(revs)-1])
	deadline = time.Now().Add(20 * time.Second)
	for gauge(t, metrics.ReplicateLagSeconds) != 0 || gauge(t, metrics.ReplicateLagRevisions) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("everything shipped, yet the lag gauges say %.3f s and %.0f revisions after 20 s", gauge(t, metrics.ReplicateLagSeconds), gauge(t, metrics.ReplicateLagRevisions))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
