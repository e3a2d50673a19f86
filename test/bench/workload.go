package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// config is the workload's shape; every loop is bounded by a count and by
// phaseTime.
type config struct {
	clients    []int
	keys       int // keys per write phase
	valueSize  int
	phaseTime  time.Duration
	listOps    int // list requests per list phase (at most)
	list100k   bool
	bigKeys    int // keys in the big list prefix
	bigLimit   int // page size of the big list
	reqTimeout time.Duration
}

// opStats is one timed phase.
type opStats struct {
	ops      int
	elapsed  time.Duration
	errs     int
	firstErr string
	lat      []time.Duration // sorted
	// serverCPU and harnessCPU are the processes' CPU time over the phase
	// (serverCPU 0: not known). On a machine whose cores the harness
	// shares, a rate is capped by the two together, so the server's CPU
	// per operation is the figure that compares the servers themselves.
	serverCPU, harnessCPU time.Duration
}

func (s opStats) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ops) / s.elapsed.Seconds()
}

func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	i := int(float64(len(lat))*p+0.5) - 1
	return lat[min(max(i, 0), len(lat)-1)]
}

// perOp formats a phase's CPU time per request ("-" when unknown).
func perOp(cpu time.Duration, ops int, known bool) string {
	if !known || ops == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", float64(cpu.Microseconds())/float64(ops))
}

// perOp is d in seconds per operation of the phase, 0 when none ran (or d
// is not known).
func (s opStats) perOp(d time.Duration) float64 {
	if s.ops == 0 {
		return 0
	}
	return d.Seconds() / float64(s.ops)
}

func (s opStats) p50() time.Duration { return pct(s.lat, 0.50) }
func (s opStats) p99() time.Duration { return pct(s.lat, 0.99) }

// levelResult is everything measured at one client count.
type levelResult struct {
	clients                         int
	create, update, get, list, big  opStats
	watch                           []time.Duration // sorted event latencies
	lost, missed, conflicts, badRes int
	notes                           []string
}

// roundResult is one server, fresh data, the whole workload.
type roundResult struct {
	levels  []*levelResult
	mem     memory
	dbBytes int64
	rev     int64
	err     error
}

// phaseHooks let the profiled target bracket each timed phase.
type phaseHooks struct {
	start func(name string)
	stop  func(name string)
	// serverPID, when set, is the server whose CPU time each phase reports
	// per request, beside the harness's own: on a machine the clients
	// share with the server, the two together bound the rate.
	serverPID int
	// dbPID, when set, is the server's PostgreSQL postmaster or mariadbd:
	// the database's CPU counts as the server's, since the store's work
	// happens there.
	dbPID int
}

// phaseCPU reads the CPU time the server, its database (if any) and the
// harness have used so far (zero for a process it cannot read).
func (h phaseHooks) phaseCPU() (server, db, harness time.Duration) {
	if h.serverPID > 0 {
		server, _ = cpuTime(h.serverPID)
	}
	if h.dbPID > 0 {
		db, _ = treeCPU(h.dbPID)
	}
	harness, _ = cpuTime(os.Getpid())
	return server, db, harness
}

// drive runs fn for i in [0, n) on `workers` goroutines sharing conns,
// until n calls are done or maxDur has passed.
func drive(ctx context.Context, conns []*clientv3.Client, workers, n int, maxDur, reqTimeout time.Duration, fn func(ctx context.Context, c *clientv3.Client, i int) error) opStats {
	return drivePaced(ctx, conns, workers, n, maxDur, reqTimeout, nil, fn)
}

// drivePaced is drive with each request waiting first for a token from
// pace (nil: none), outside the time it measures.
func drivePaced(ctx context.Context, conns []*clientv3.Client, workers, n int, maxDur, reqTimeout time.Duration, pace <-chan struct{}, fn func(ctx context.Context, c *clientv3.Client, i int) error) opStats {
	var next atomic.Int64
	var mu sync.Mutex
	var st opStats
	deadline := time.Now().Add(maxDur)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(c *clientv3.Client) {
			defer wg.Done()
			var lat []time.Duration
			errs := 0
			first := ""
			var expired <-chan time.Time // nil, so never, unless paced
			if pace != nil {
				expired = time.After(time.Until(deadline))
			}
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if pace != nil {
					select {
					case <-pace:
					case <-ctx.Done():
						continue
					case <-expired:
						continue
					}
				}
				i := int(next.Add(1)) - 1
				if i >= n {
					break
				}
				rctx, cancel := context.WithTimeout(ctx, reqTimeout)
				t0 := time.Now()
				err := fn(rctx, c, i)
				d := time.Since(t0)
				cancel()
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
					continue
				}
				lat = append(lat, d)
			}
			mu.Lock()
			st.lat = append(st.lat, lat...)
			st.errs += errs
			if st.firstErr == "" {
				st.firstErr = first
			}
			mu.Unlock()
		}(conns[w%len(conns)])
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	st.ops = len(st.lat)
	sort.Slice(st.lat, func(i, j int) bool { return st.lat[i] < st.lat[j] })
	return st
}

func dialConns(endpoint string, n int) ([]*clientv3.Client, error) {
	var conns []*clientv3.Client
	for i := 0; i < n; i++ {
		c, err := newClient(endpoint)
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*clientv3.Client) {
	for _, c := range conns {
		c.Close()
	}
}

const (
	list500Prefix  = "/registry/bench-list500/"
	list100kPrefix = "/registry/bench-list100k/"
)

// fill puts n keys under prefix with plain Puts (the one write every peer
// accepts in any shape), untimed.
func fill(ctx context.Context, conns []*clientv3.Client, cfg config, prefix string, n int, val string) error {
	st := drive(ctx, conns, 64, n, 30*time.Minute, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, i int) error {
		_, err := c.Put(ctx, fmt.Sprintf("%sk%06d", prefix, i), val)
		return err
	})
	if st.ops != n {
		return fmt.Errorf("fill %s: %d of %d puts succeeded (%d errors, first: %s)", prefix, st.ops, n, st.errs, st.firstErr)
	}
	return nil
}

// runWorkload is one round against a running server.
func runWorkload(ctx context.Context, endpoint string, cfg config, hooks phaseHooks) (*roundResult, error) {
	conns, err := dialConns(endpoint, 16)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	val := strings.Repeat("v", cfg.valueSize)
	if err := fill(ctx, conns, cfg, list500Prefix, 500, val); err != nil {
		return nil, err
	}
	if cfg.list100k {
		t0 := time.Now()
		if err := fill(ctx, conns, cfg, list100kPrefix, cfg.bigKeys, val); err != nil {
			return nil, err
		}
		logf("    filled %d keys for the big list in %v", cfg.bigKeys, time.Since(t0).Round(time.Second))
	}
	rr := &roundResult{}
	for _, c := range cfg.clients {
		lr, err := runLevel(ctx, conns, cfg, c, val, hooks)
		if err != nil {
			return nil, fmt.Errorf("%d clients: %w", c, err)
		}
		rr.levels = append(rr.levels, lr)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if g, err := conns[0].Get(sctx, "/registry/bench-none"); err == nil {
		rr.rev = g.Header.Revision
	}
	return rr, nil
}

// watchTracker follows one prefix watch with prev_kv and records, per key,
// the revision of the create and update events and their latency from the
// moment the write was sent.
type watchTracker struct {
	n                     int
	sentCreate, sentUpd   []atomic.Int64 // unix ns the write was sent
	gotCreate, gotUpd     []atomic.Int64 // revision of the event received
	prevOfUpd             []atomic.Int64 // prev_kv mod_revision on the update event
	received              atomic.Int64
	misordered, malformed atomic.Int64
	mu                    sync.Mutex
	lat                   []time.Duration
	err                   atomic.Value // string
	done                  chan struct{}
}

func newWatchTracker(n int) *watchTracker {
	return &watchTracker{n: n,
		sentCreate: make([]atomic.Int64, n), sentUpd: make([]atomic.Int64, n),
		gotCreate: make([]atomic.Int64, n), gotUpd: make([]atomic.Int64, n),
		prevOfUpd: make([]atomic.Int64, n), done: make(chan struct{})}
}

func keyIndex(key []byte) (int, bool) {
	s := string(key)
	j := strings.LastIndexByte(s, 'k')
	if j < 0 {
		return 0, false
	}
	i, err := strconv.Atoi(s[j+1:])
	return i, err == nil
}

func (w *watchTracker) run(wch clientv3.WatchChan) {
	defer close(w.done)
	var last int64
	for resp := range wch {
		now := time.Now().UnixNano()
		if err := resp.Err(); err != nil {
			w.err.Store(err.Error())
			return
		}
		var lats []time.Duration
		for _, ev := range resp.Events {
			rev := ev.Kv.ModRevision
			if rev < last {
				w.misordered.Add(1)
			}
			last = rev
			i, ok := keyIndex(ev.Kv.Key)
			if !ok || i >= w.n || ev.Type != clientv3.EventTypePut {
				w.malformed.Add(1)
				continue
			}
			var sent int64
			if ev.IsCreate() {
				w.gotCreate[i].Store(rev)
				sent = w.sentCreate[i].Load()
			} else {
				w.gotUpd[i].Store(rev)
				if ev.PrevKv != nil {
					w.prevOfUpd[i].Store(ev.PrevKv.ModRevision)
				}
				sent = w.sentUpd[i].Load()
			}
			w.received.Add(1)
			if sent > 0 {
				lats = append(lats, time.Duration(now-sent))
			}
		}
		w.mu.Lock()
		w.lat = append(w.lat, lats...)
		w.mu.Unlock()
	}
}

// waitFor waits until want events have arrived or grace has passed.
func (w *watchTracker) waitFor(want int64, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for w.received.Load() < want && time.Now().Before(deadline) {
		select {
		case <-w.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func runLevel(ctx context.Context, conns []*clientv3.Client, cfg config, clients int, val string, hooks phaseHooks) (*levelResult, error) {
	lr := &levelResult{clients: clients}
	n := cfg.keys
	prefix := fmt.Sprintf("/registry/bench-c%03d/", clients)
	key := func(i int) string { return fmt.Sprintf("%sk%06d", prefix, i) }
	nconn := min(clients, len(conns))
	cs := conns[:nconn]

	// The watcher has its own connection, as the apiserver's watch cache
	// effectively does.
	wc, err := newClient(conns[0].Endpoints()[0])
	if err != nil {
		return nil, err
	}
	defer wc.Close()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wt := newWatchTracker(n)
	wch := wc.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-wch:
		if !ok || !resp.Created {
			return nil, fmt.Errorf("watch not created: %v", resp.Err())
		}
	case <-time.After(30 * time.Second):
		return nil, errors.New("watch not created within 30s")
	}
	go wt.run(wch)

	phase := func(name string, f func() opStats) opStats {
		label := fmt.Sprintf("%s-c%d", name, clients)
		if hooks.start != nil {
			hooks.start(label)
		}
		srv0, db0, self0 := hooks.phaseCPU()
		st := f()
		srv1, db1, self1 := hooks.phaseCPU()
		if hooks.serverPID > 0 {
			st.serverCPU = srv1 - srv0 + db1 - db0
		}
		st.harnessCPU = self1 - self0
		if hooks.stop != nil {
			hooks.stop(label)
		}
		dbCPU := ""
		if hooks.dbPID > 0 {
			dbCPU = " + database " + perOp(db1-db0, st.ops, true)
		}
		logf("    %-10s %6d ops %8.0f/s p50 %-9v p99 %-9v CPU per op: server %s%s harness %s, errors %d %s", label, st.ops, st.rate(), st.p50().Round(10*time.Microsecond), st.p99().Round(10*time.Microsecond),
			perOp(srv1-srv0, st.ops, hooks.serverPID > 0), dbCPU, perOp(self1-self0, st.ops, true), st.errs, st.firstErr)
		return st
	}

	// Create: If(mod_revision(k) == 0) Then(Put k).
	createRev := make([]atomic.Int64, n)
	var notCreated atomic.Int64
	lr.create = phase("create", func() opStats {
		return drive(ctx, cs, clients, n, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, i int) error {
			k := key(i)
			wt.sentCreate[i].Store(time.Now().UnixNano())
			resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, val)).Commit()
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				notCreated.Add(1)
				return nil
			}
			createRev[i].Store(resp.Header.Revision)
			return nil
		})
	})
	lr.conflicts += int(notCreated.Load())
	var acked []int
	for i := range createRev {
		if createRev[i].Load() > 0 {
			acked = append(acked, i)
		}
	}

	// Every acknowledged create must be readable at its revision, and the
	// prefix count must be exact.
	var lostCreate atomic.Int64
	vst := drive(ctx, cs, 16, len(acked), 2*time.Minute, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
		i := acked[j]
		resp, err := c.Get(ctx, key(i))
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != createRev[i].Load() {
			lostCreate.Add(1)
		}
		return nil
	})
	lr.lost += int(lostCreate.Load()) + vst.errs
	if vst.errs > 0 {
		lr.notes = append(lr.notes, fmt.Sprintf("verify errors: %d (%s)", vst.errs, vst.firstErr))
	}
	cctx, ccancel := context.WithTimeout(ctx, cfg.reqTimeout)
	cresp, err := cs[0].Get(cctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	ccancel()
	if err != nil {
		lr.notes = append(lr.notes, "count: "+err.Error())
		lr.badRes++
	} else if cresp.Count != int64(len(acked)) {
		lr.notes = append(lr.notes, fmt.Sprintf("prefix count %d, %d creates acknowledged", cresp.Count, len(acked)))
		lr.badRes++
	}

	// Update: If(mod_revision(k) == R) Then(Put k) Else(Get k). Nobody else
	// writes these keys, so the Else branch means R was wrong or lost.
	updRev := make([]atomic.Int64, n)
	var conflicts atomic.Int64
	lr.update = phase("update", func() opStats {
		return drive(ctx, cs, clients, len(acked), cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
			i := acked[j]
			k := key(i)
			wt.sentUpd[i].Store(time.Now().UnixNano())
			resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", createRev[i].Load())).
				Then(clientv3.OpPut(k, val)).Else(clientv3.OpGet(k)).Commit()
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				conflicts.Add(1)
				return nil
			}
			updRev[i].Store(resp.Header.Revision)
			return nil
		})
	})
	lr.conflicts += int(conflicts.Load())

	// Wait for the watcher to see every acknowledged write (bounded).
	var want int64
	for _, i := range acked {
		want++
		if updRev[i].Load() > 0 {
			want++
		}
	}
	wt.waitFor(want, 10*time.Second)

	// Get: point reads of the acknowledged keys, each checked against the
	// newest acknowledged revision.
	var stale atomic.Int64
	lr.get = phase("get", func() opStats {
		if len(acked) == 0 {
			return opStats{}
		}
		return drive(ctx, cs, clients, n, cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
			i := acked[j%len(acked)]
			resp, err := c.Get(ctx, key(i))
			if err != nil {
				return err
			}
			want := updRev[i].Load()
			if want == 0 {
				want = createRev[i].Load()
			}
			if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != want {
				stale.Add(1)
			}
			return nil
		})
	})
	lr.lost += int(stale.Load())

	// Paged list with exact count, as the apiserver sends it: limit 500 on
	// a prefix holding 500 keys.
	var badList atomic.Int64
	var badExample atomic.Value // string: the first wrong answer
	lr.list = phase("list500", func() opStats {
		return drive(ctx, cs, clients, max(cfg.listOps, 2*clients), cfg.phaseTime, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
			resp, err := c.Get(ctx, list500Prefix, clientv3.WithPrefix(), clientv3.WithLimit(500))
			if err != nil {
				return err
			}
			if resp.Count != 500 || len(resp.Kvs) != 500 || resp.More {
				badList.Add(1)
				badExample.CompareAndSwap(nil, fmt.Sprintf("list 500/500 answered count=%d kvs=%d more=%v", resp.Count, len(resp.Kvs), resp.More))
			}
			return nil
		})
	})
	if cfg.list100k {
		lr.big = phase("list10k", func() opStats {
			return drive(ctx, cs, clients, max(20, 2*clients), cfg.phaseTime, 2*cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, _ int) error {
				resp, err := c.Get(ctx, list100kPrefix, clientv3.WithPrefix(), clientv3.WithLimit(int64(cfg.bigLimit)))
				if err != nil {
					return err
				}
				if resp.Count != int64(cfg.bigKeys) || len(resp.Kvs) != cfg.bigLimit || !resp.More {
					badList.Add(1)
					badExample.CompareAndSwap(nil, fmt.Sprintf("list 10k/100k answered count=%d kvs=%d more=%v", resp.Count, len(resp.Kvs), resp.More))
				}
				return nil
			})
		})
	}
	if b := badList.Load(); b > 0 {
		lr.badRes += int(b)
		ex, _ := badExample.Load().(string)
		lr.notes = append(lr.notes, fmt.Sprintf("%d lists with a wrong count, length or more (first: %s)", b, ex))
	}

	// Watch accounting.
	wcancel()
	<-wt.done
	if e, _ := wt.err.Load().(string); e != "" && ctx.Err() == nil && !strings.Contains(e, "context canceled") {
		lr.notes = append(lr.notes, "watch: "+e)
	}
	for _, i := range acked {
		if wt.gotCreate[i].Load() != createRev[i].Load() {
			lr.missed++
		}
		if u := updRev[i].Load(); u > 0 {
			if wt.gotUpd[i].Load() != u {
				lr.missed++
			} else if wt.prevOfUpd[i].Load() != createRev[i].Load() {
				lr.badRes++ // update event without the right prev_kv
			}
		}
	}
	lr.badRes += int(wt.misordered.Load() + wt.malformed.Load())
	if m := wt.misordered.Load(); m > 0 {
		lr.notes = append(lr.notes, fmt.Sprintf("%d watch events out of revision order", m))
	}
	wt.mu.Lock()
	lr.watch = wt.lat
	wt.mu.Unlock()
	sort.Slice(lr.watch, func(i, j int) bool { return lr.watch[i] < lr.watch[j] })
	return lr, nil
}
