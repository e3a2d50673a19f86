package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The tenants workload (issue 58's 30-tenant test): what a node hosting
// many small control planes pays for their stores. -tenants-stores
// processes of one target run at once, each on its own database of the
// one throwaway PostgreSQL, each loaded with -tenants-objects ConfigMaps
// as kube-apiserver stores them (kobjects.go) in 5 namespaces, one store
// after the other. Then each store gets one watcher, as kube-apiserver's
// watch cache watches ConfigMaps (a prefix watch with prev_kv and progress
// notifications, on its own connection), and a trickle of updates,
// -tenants-rate per second per store for -tenants-time (GuaranteedUpdate's
// Txn, the stores in turn on one open-loop schedule). The stores' VmRSS is
// summed every 250 ms: its peak over the watched updates, and the sum at
// the end. PostgreSQL's own memory is the same server's for both targets
// and is not counted. One round per target.

// pgMaxConns is the throwaway cluster's max_connections: enough for
// kine's unbounded pool at 64 clients, and with the tenants workload for
// its stores (kine held 18 connections each 30 s after its load, 3 after
// 3 minutes; QuantyKube 4).
func pgMaxConns(workloads []string, tc tenantsConfig) int {
	if slices.Contains(workloads, "tenants") {
		return max(300, 50*tc.stores+100)
	}
	return 300
}

// tenantsNamespaces is how many namespaces a tenant's objects spread over.
const tenantsNamespaces = 5

func (tc *tenantsConfig) check() error {
	if tc.stores < 1 || tc.objects < tenantsNamespaces || tc.objectSize < 1 || tc.rate <= 0 || tc.steady < time.Second {
		return fmt.Errorf("tenants: want stores >= 1, objects >= %d, a size >= 1, a rate > 0 and a time >= 1s", tenantsNamespaces)
	}
	if tc.totalRate() < 1 {
		return fmt.Errorf("tenants: -tenants-rate %g × %d stores is under one update per second", tc.rate, tc.stores)
	}
	return nil
}

// totalRate is the updates per second of all the stores together.
func (tc *tenantsConfig) totalRate() int { return int(math.Round(tc.rate * float64(tc.stores))) }

// tenantsResult is one target's run.
type tenantsResult struct {
	stores, objects   int
	liveBytes         int64 // one store's keys and values
	load              time.Duration
	afterLoad         int64 // summed RSS when every store is loaded
	peak, end         int64 // summed RSS: highest over the watched updates, and after them
	endMin, endMax    int64 // one store's RSS at the end
	updates           *pacedStats
	events, owed      int64 // delivered to the watchers; acknowledged updates
	missingPrev, errs int64 // update events without prev_kv; watch errors
	pgConns           int   // PostgreSQL's connections to the stores' databases at the end
}

func (r *tenantsResult) String() string {
	return fmt.Sprintf("%d stores × %d objects loaded in %v; summed RSS %s after the load, peak %s, end %s (a store %s to %s); %d updates, %d of %d events delivered",
		r.stores, r.objects, r.load.Round(100*time.Millisecond), fmtMB(r.afterLoad), fmtMB(r.peak), fmtMB(r.end), fmtMB(r.endMin), fmtMB(r.endMax),
		r.updates.done, r.events, r.owed)
}

// tenantsSkip runs the PostgreSQL targets on a direct connection.
func tenantsSkip(t target) string {
	switch {
	case t.engine != "postgres":
		return "the tenants share one PostgreSQL"
	case t.name == "quantykube/pgbouncer":
		return "the comparison is on a direct connection"
	}
	return ""
}

// tenantStore is one tenant: its server, its client, its objects, and
// what its watcher saw.
type tenantStore struct {
	fr          *fresh
	srv         *server
	c           *clientv3.Client
	objs        *scaleObjects
	acked       atomic.Int64
	events      atomic.Int64
	missingPrev atomic.Int64
	watchErrs   atomic.Int64
}

func runTenants(ctx context.Context, t target, workDir string, pg *pgCluster, tc tenantsConfig, reqTimeout time.Duration) (*tenantsResult, error) {
	stores := make([]*tenantStore, 0, tc.stores)
	defer func() {
		for _, s := range stores {
			if s.c != nil {
				s.c.Close()
			}
			if s.srv != nil {
				s.srv.stop()
			}
			s.fr.cleanup()
		}
	}()
	pids := make([]int, 0, tc.stores)
	for i := range tc.stores {
		fr, err := prepare(ctx, t, workDir, pg, fmt.Sprintf("-tenant%02d", i), 1)
		if err != nil {
			return nil, err
		}
		s := &tenantStore{fr: fr}
		stores = append(stores, s)
		if s.srv, err = launch(ctx, t, fr.dir, fr.db); err != nil {
			return nil, fmt.Errorf("store %d: %w", i, err)
		}
		if s.c, err = newClient(s.srv.endpoint); err != nil {
			return nil, fmt.Errorf("store %d: %w", i, err)
		}
		if s.objs, err = newScaleObjects(tc.objects, tenantsNamespaces, tc.objectSize, fmt.Sprintf("tenant%02d", i)); err != nil {
			return nil, err
		}
		pids = append(pids, s.srv.pid)
	}
	var err error
	rss := startSampler(pids, "load")
	defer rss.finish()
	r := &tenantsResult{stores: tc.stores, objects: tc.objects}
	t0 := time.Now()
	for i, s := range stores {
		if err := s.objs.load(ctx, []*clientv3.Client{s.c}, 8, reqTimeout); err != nil {
			return nil, fmt.Errorf("store %d: %w", i, err)
		}
	}
	r.load, r.liveBytes = time.Since(t0), stores[0].objs.liveBytes.Load()
	r.afterLoad = rss.sample()
	logf("    %d stores × %d objects loaded in %v; summed RSS %s; watching, %d updates/s in all for %v",
		tc.stores, tc.objects, r.load.Round(100*time.Millisecond), fmtMB(r.afterLoad), tc.totalRate(), tc.steady)

	rss.enter("watched")
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	for i, s := range stores {
		if err := s.watch(wctx); err != nil {
			return nil, fmt.Errorf("store %d: %w", i, err)
		}
	}
	sched := schedule{start: time.Now(), rate: tc.totalRate()}
	n := sched.count(tc.steady)
	r.updates = runOpenLoop(ctx, sched, n, steadyInFlight, reqTimeout, func(ctx context.Context, j int) (bool, error) {
		s := stores[j%len(stores)]
		stale, err := s.objs.update(ctx, s.c, (j/len(stores))%tc.objects)
		if err == nil && !stale {
			s.acked.Add(1)
		}
		return stale, err
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// Every acknowledged update's event, or 30 s.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if r.collect(stores); r.events >= r.owed {
			break
		}
	}
	r.collect(stores)
	r.peak = rss.peak("watched")
	r.end = rss.finish()
	r.peak = max(r.peak, r.end)
	dbs := make([]string, len(stores))
	for i, s := range stores {
		dbs[i] = s.fr.db
	}
	if r.pgConns, err = pg.connections(ctx, dbs); err != nil {
		return nil, err
	}
	for i, pid := range pids {
		m, err := readMemory(pid)
		if err != nil {
			return nil, fmt.Errorf("store %d: %w", i, err)
		}
		if i == 0 || m.rss < r.endMin {
			r.endMin = m.rss
		}
		r.endMax = max(r.endMax, m.rss)
	}
	switch {
	case r.updates.errs > 0:
		return nil, fmt.Errorf("%d of %d updates failed, first: %s", r.updates.errs, n, r.updates.firstErr)
	case r.errs > 0:
		return nil, fmt.Errorf("%d watches ended with an error", r.errs)
	}
	return r, nil
}

// collect sums what the stores' watchers saw.
func (r *tenantsResult) collect(stores []*tenantStore) {
	r.events, r.owed, r.missingPrev, r.errs = 0, 0, 0, 0
	for _, s := range stores {
		r.events += s.events.Load()
		r.owed += s.acked.Load()
		r.missingPrev += s.missingPrev.Load()
		r.errs += s.watchErrs.Load()
	}
}

// watch opens s's watcher and counts its events until ctx ends.
func (s *tenantStore) watch(ctx context.Context) error {
	wch := s.c.Watch(ctx, "/registry/configmaps/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-wch:
		if !ok || !resp.Created {
			return fmt.Errorf("watch not created: %v", resp.Err())
		}
	case <-time.After(30 * time.Second):
		return fmt.Errorf("watch not created within 30s")
	}
	go func() {
		for resp := range wch {
			if err := resp.Err(); err != nil && ctx.Err() == nil {
				s.watchErrs.Add(1)
			}
			for _, ev := range resp.Events {
				s.events.Add(1)
				if ev.IsModify() && ev.PrevKv == nil {
					s.missingPrev.Add(1)
				}
			}
		}
	}()
	return nil
}

// eachTarget runs f once per target that skip lets run, in order.
func eachTarget[R any](ctx context.Context, name string, targets []target, skip func(target) string, f func(ctx context.Context, t target) (R, error)) []*extraRun[R] {
	out := make([]*extraRun[R], len(targets))
	for i, t := range targets {
		run := &extraRun[R]{t: t, skipped: skip(t)}
		out[i] = run
		if run.skipped != "" || ctx.Err() != nil {
			continue
		}
		logf("%s: %s", t.name, name)
		res, err := f(ctx, t)
		if err != nil {
			logf("%s: %s: %v", t.name, name, err)
			run.errs = append(run.errs, err.Error())
			continue
		}
		run.rounds = append(run.rounds, res)
		if sum, ok := any(res).(fmt.Stringer); ok {
			logf("%s: %s: %s", t.name, name, sum)
		}
	}
	return out
}

func printTenants(w io.Writer, runs []*extraRun[*tenantsResult], tc tenantsConfig) {
	fmt.Fprintf(w, "%d stores of each target at once, each on its own database of one PostgreSQL, each loaded with %d ConfigMaps of %d bytes (protobuf) in %d namespaces; then one watcher per store (prefix, prev_kv, progress notify) and %g updates/s per store for %v. The stores' VmRSS summed every %v; PostgreSQL's own memory not counted; its connections to the stores' databases counted at the end (pg_stat_activity). One round.\n\n",
		tc.stores, tc.objects, tc.objectSize, tenantsNamespaces, tc.rate, tc.steady, rssInterval)
	fmt.Fprintln(w, "| target | stores | load (all) | summed RSS after load | peak (watched updates) | end | per store at end (min-max) | live data per store | updates | events delivered / owed | PostgreSQL connections |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var qk, kine *tenantsResult
	for _, r := range runs {
		if len(r.rounds) == 0 {
			continue
		}
		x := r.rounds[0]
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s-%s | %s | %d | %d / %d | %d |\n", r.t.name, x.stores, fmtSec(x.load.Seconds()),
			fmtMB(x.afterLoad), fmtMB(x.peak), fmtMB(x.end), fmtMB(x.endMin), fmtMB(x.endMax), fmtMB1(x.liveBytes), x.updates.done, x.events, x.owed, x.pgConns)
		switch {
		case isQuantyKube(r.t):
			qk = x
		case r.t.name == "kine/postgres":
			kine = x
		}
	}
	for _, r := range runs {
		for _, x := range r.rounds {
			if x.missingPrev > 0 {
				fmt.Fprintf(w, "\n- %s: %d update events without prev_kv\n", r.t.name, x.missingPrev)
			}
		}
	}
	printNotes(w, runs)
	if qk != nil && kine != nil {
		fmt.Fprintf(w, "\nSummed RSS, QuantyKube ÷ kine: peak %.2fx, end %.2fx (issue 58's target for one store: at most 1.5x).\n",
			float64(qk.peak)/float64(kine.peak), float64(qk.end)/float64(kine.end))
	}
}
