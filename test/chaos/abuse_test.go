//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestAbuse runs each abusive workload against QuantyKube (on SQLite, as a
// process, so that its memory can be read) and against etcd v3.6, with the
// same code, and reports their figures side by side. It asserts what must
// hold whatever the speed: every request answered, every event delivered,
// QuantyKube's memory bounded; the figures themselves are reported, not
// judged.
func TestAbuse(t *testing.T) {
	var figures []figure
	t.Cleanup(func() { reportAbuse(t, figures) })
	for _, w := range []struct {
		name string
		run  func(t *testing.T, x *framework.Target) []figure
	}{
		{"DeleteRange of 200,000 keys", bigDelete},
		{"10,000 watchers", manyWatchers},
		{"1,000 concurrent clients", manyClients},
		{"a watcher that never reads", slowWatcher},
	} {
		t.Run(w.name, func(t *testing.T) {
			for _, b := range []framework.Backend{framework.SQLite, framework.Etcd} {
				t.Run(string(b), func(t *testing.T) {
					x := framework.Start(t, b, framework.Options{Process: true})
					for _, f := range w.run(t, x) {
						f.workload, f.backend = w.name, b
						figures = append(figures, f)
					}
				})
			}
		})
	}
}

// figure is one measured value of a workload on a backend.
type figure struct {
	workload string
	backend  framework.Backend
	name     string
	value    string
}

func fig(name, format string, args ...any) figure {
	return figure{name: name, value: fmt.Sprintf(format, args...)}
}

// readRSS is the resident memory of process pid, in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// rss is readRSS, failing t on an error.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := readRSS(pid)
	if err != nil {
		t.Fatalf("reading the server's memory: %v", err)
	}
	return b
}

// peakRSS samples the server's resident memory until stop is called, and
// returns the highest sample.
func peakRSS(t *testing.T, pid int) (stop func() int64) {
	peak := rss(t, pid)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if b, err := readRSS(pid); err == nil {
					peak = max(peak, b)
				}
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		return max(peak, rss(t, pid))
	}
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// latencies summarizes request durations.
func latencies(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("%d requests, p50 %v, p99 %v, max %v", len(ds), q(0.5), q(0.99), ds[len(ds)-1].Round(100*time.Microsecond))
}

// bigDelete: a DeleteRange of 200,000 keys while eight other clients read
// and write keys of their own. Every request of theirs must succeed; their
// latencies during the delete are reported.
func bigDelete(t *testing.T, x *framework.Target) []figure {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cli := x.Client(t)
	const keys, perTxn = 200_000, 128
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for first := 0; first < keys; first += perTxn {
		g.Go(func() error {
			var ops []clientv3.Op
			for i := first; i < min(keys, first+perTxn); i++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("/big/%06d", i), "value-0123456789"))
			}
			_, err := cli.Txn(gctx).Then(ops...).Commit()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("writing %d keys: %v", keys, err)
	}

	type sample struct {
		start time.Time
		took  time.Duration
		write bool
	}
	var mu sync.Mutex
	var samples []sample
	var failures []string
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c := range 8 {
		other := x.Client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("/other/%d", c)
			for i := 0; !stop.Load() && i < 1_000_000; i++ {
				write := i%2 == 1
				start := time.Now()
				rctx, rcancel := context.WithTimeout(ctx, time.Minute)
				var err error
				if write {
					_, err = other.Put(rctx, key, strconv.Itoa(i))
				} else {
					_, err = other.Get(rctx, key)
				}
				rcancel()
				mu.Lock()
				samples = append(samples, sample{start, time.Since(start), write})
				if err != nil {
					failures = append(failures, err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	begin := time.Now()
	resp, err := cli.Delete(ctx, "/big/", clientv3.WithPrefix())
	took := time.Since(begin)
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("DeleteRange: %v", err)
	}
	if resp.Deleted != keys {
		t.Fatalf("DeleteRange deleted %d keys, want %d", resp.Deleted, keys)
	}
	if len(failures) > 0 {
		t.Errorf("%d requests of the other clients failed; first: %s", len(failures), failures[0])
	}
	var reads, writes []time.Duration
	for _, s := range samples {
		if s.start.Add(s.took).Before(begin) || s.start.After(begin.Add(took)) {
			continue // not during the delete
		}
		if s.write {
			writes = append(writes, s.took)
		} else {
			reads = append(reads, s.took)
		}
	}
	if len(reads) == 0 {
		t.Errorf("no read of another client ran during the delete")
	}
	return []figure{
		fig("the DeleteRange", "%v", took.Round(time.Millisecond)),
		fig("other clients' reads during it", "%s", latencies(reads)),
		fig("other clients' writes during it", "%s", latencies(writes)),
	}
}

// manyWatchers opens 10,000 watchers on one server, each on a key of its
// own (ten clients, a thousand watchers each), and checks that a write
// reaches its watcher; the server's memory is reported and bounded.
func manyWatchers(t *testing.T, x *framework.Target) []figure {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const clients, each = 10, 1000
	pid := x.PID(0)
	before := rss(t, pid)
	begin := time.Now()
	chans := make([]clientv3.WatchChan, clients*each)
	for c := range clients {
		cli := x.Client(t)
		for i := range each {
			n := c*each + i
			chans[n] = cli.Watch(ctx, fmt.Sprintf("/w/%05d", n), clientv3.WithCreatedNotify())
		}
	}
	for n, ch := range chans {
		select {
		case wr := <-ch:
			if !wr.Created || wr.Err() != nil {
				t.Fatalf("watcher %d: %+v", n, wr)
			}
		case <-ctx.Done():
			t.Fatalf("watcher %d not created", n)
		}
	}
	created := time.Since(begin)
	after := rss(t, pid)
	cli := x.Client(t)
	for n := 0; n < len(chans); n += 100 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/w/%05d", n), "v"); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < len(chans); n += 100 {
		select {
		case wr := <-chans[n]:
			if len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != fmt.Sprintf("/w/%05d", n) {
				t.Fatalf("watcher %d: %+v", n, wr)
			}
		case <-ctx.Done():
			t.Fatalf("watcher %d: no event", n)
		}
	}
	// Bounded: a watcher costs the server a few kilobytes, not the
	// megabytes a buffer per watcher would. (etcd's figure is reported,
	// not judged.)
	if per := (after - before) / (clients * each); x.Backend().IsQuantyKube() && per > 64<<10 {
		t.Errorf("%d bytes of server memory per watcher", per)
	}
	return []figure{
		fig("server memory, idle", "%s", mib(before)),
		fig("server memory with 10,000 watchers", "%s (%.1f KiB per watcher)", mib(after), float64(after-before)/(clients*each)/1024),
		fig("creating them", "%v", created.Round(time.Millisecond)),
	}
}

// manyClients runs 1,000 clients at once, each on a connection of its own,
// each writing and reading its key five times. Every request must succeed;
// the server's peak memory is reported and bounded.
func manyClients(t *testing.T, x *framework.Target) []figure {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n, rounds = 1000, 5
	pid := x.PID(0)
	before := rss(t, pid)
	peak := peakRSS(t, pid)
	clis := make([]*clientv3.Client, n)
	for i := range clis {
		cli := x.Client(t)
		clis[i] = cli
	}
	begin := time.Now()
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, cli := range clis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			key := fmt.Sprintf("/c/%04d", i)
			for r := range rounds {
				_, err := cli.Put(ctx, key, strconv.Itoa(r))
				if err == nil {
					var g *clientv3.GetResponse
					if g, err = cli.Get(ctx, key); err == nil && (len(g.Kvs) != 1 || string(g.Kvs[0].Value) != strconv.Itoa(r)) {
						err = fmt.Errorf("read %v after writing %d", g.Kvs, r)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	took := time.Since(begin)
	high := peak()
	if f := failed.Load(); f > 0 {
		t.Errorf("%d of %d requests failed; first: %v", f, 2*n*rounds, firstErr.Load())
	}
	if per := (high - before) / n; x.Backend().IsQuantyKube() && per > 1<<20 {
		t.Errorf("%d bytes of server memory per client", per)
	}
	return []figure{
		fig("server memory, idle", "%s", mib(before)),
		fig("server memory at peak, 1,000 clients", "%s", mib(high)),
		fig("10,000 requests", "%v", took.Round(time.Millisecond)),
	}
}

// slowWatcher opens a watch stream that never reads, on a connection of
// its own, while 20,000 writes of 10 KiB go by: another watcher must still
// get every event, and the server must not keep what the slow one has not
// read (200 MB): its memory is sampled throughout.
func slowWatcher(t *testing.T, x *framework.Target) []figure {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const writes, size = 20_000, 10 << 10
	pid := x.PID(0)

	slowCli := x.Client(t)
	slow, err := pb.NewWatchClient(slowCli.ActiveConnection()).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte("/s/"), RangeEnd: []byte("/s0"), PrevKv: true,
	}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := slow.Recv(); err != nil || !r.Created {
		t.Fatalf("slow watcher: %v %v", r, err)
	}
	// From here on nothing reads slow.

	cli := x.Client(t)
	fast := cli.Watch(ctx, "/s/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	var received atomic.Int64
	fastDone := make(chan struct{})
	go func() {
		defer close(fastDone)
		for wr := range fast {
			if received.Add(int64(len(wr.Events))) >= writes {
				return
			}
		}
	}()

	before := rss(t, pid)
	peak := peakRSS(t, pid)
	begin := time.Now()
	value := strings.Repeat("v", size)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range writes {
		g.Go(func() error {
			_, err := cli.Put(gctx, fmt.Sprintf("/s/%03d", i%500), value)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("writes: %v", err)
	}
	wrote := time.Since(begin)
	select {
	case <-fastDone:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the reading watcher got %d of %d events", received.Load(), writes)
	}
	delivered := time.Since(begin)
	high := peak()
	// Bounded: under what went by. A server that kept the slow watcher's
	// backlog would hold twice that (each event carries its prev_kv).
	// etcd keeps a slow watcher's pending events (its "victims"): its
	// figure is reported, not judged.
	if grew := high - before; x.Backend().IsQuantyKube() && grew > writes*size {
		t.Errorf("server memory grew by %s while %s went by a watcher that did not read", mib(grew), mib(writes*size))
	}
	return []figure{
		fig("server memory before", "%s", mib(before)),
		fig("server memory at peak while 200 MB went by", "%s", mib(high)),
		fig("20,000 writes of 10 KiB", "%v", wrote.Round(time.Millisecond)),
		fig("all delivered to the watcher that reads", "%v after the first write", delivered.Round(time.Millisecond)),
	}
}

// reportAbuse prints the figures side by side (and appends them to
// $QUANTY_CHAOS_REPORT).
func reportAbuse(t *testing.T, figures []figure) {
	var b strings.Builder
	fmt.Fprintf(&b, "| workload | figure | QuantyKube (SQLite) | etcd v3.6.16 |\n|---|---|---|---|\n")
	type key struct{ workload, name string }
	var order []key
	vals := map[key]map[framework.Backend]string{}
	for _, f := range figures {
		k := key{f.workload, f.name}
		if vals[k] == nil {
			vals[k] = map[framework.Backend]string{}
			order = append(order, k)
		}
		vals[k][f.backend] = f.value
	}
	for _, k := range order {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", k.workload, k.name, vals[k][framework.SQLite], vals[k][framework.Etcd])
	}
	t.Logf("abuse:%s", b.String())
	appendReport(t, b.String())
}
