package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/connectivity"
)

// CheckPerfCommand is `quantykube check perf`: etcdctl v3.6's `check perf`,
// the same loads, keys, values and thresholds, through the etcd API, so
// that it measures QuantyKube and etcd alike.
type CheckPerfCommand struct{}

// perfLoad is one of etcdctl check perf's workload models: clients put
// fresh keys at a rate at most limit per second for duration.
type perfLoad struct {
	name, long string
	limit      int // puts per second, at most
	clients    int // etcd clients, each its own connection
	duration   time.Duration
}

// perfLoads are etcdctl v3.6's checkPerfCfgMap, in its order.
var perfLoads = []perfLoad{
	{"s", "small", 150, 50, time.Minute},
	{"m", "medium", 1000, 200, time.Minute},
	{"l", "large", 8000, 500, time.Minute},
	{"xl", "xLarge", 15000, 1000, time.Minute},
}

// etcdctl's key and value: the prefix and 256 bytes, random, and 1 KiB.
const (
	perfKeyBytes   = 256
	perfValueBytes = 1024
)

// etcdctl's thresholds: a check passes with no failed request, a
// throughput above 90% of the load's limit, no request slower than half
// a second and a standard deviation of the latencies within 100 ms.
const (
	perfMinThroughputRatio = 0.9
	perfMaxSlowest         = 0.5 // seconds
	perfMaxStddev          = 0.1 // seconds
)

// perfCleanupTimeout bounds the deletion of the keys written, and the
// compaction and defragmentation after it, as etcdctl's 30 s.
const perfCleanupTimeout = 30 * time.Second

// checkPerfDuration, when set, replaces the loads' minute: tests shorten
// the run with it; no flag reaches it.
var checkPerfDuration time.Duration

// errPerfFail is a check that ran and failed a threshold: quantykube
// exits 1, as etcdctl does.
var errPerfFail = errors.New("FAIL")

// Usage is check perf's help.
func (CheckPerfCommand) Usage() string {
	return `quantykube check perf [--endpoints HOST:PORT[,HOST:PORT]] [--load s|m|l|xl] [--prefix P] [--auto-compact] [--auto-defrag]

Checks, as etcdctl v3.6's check perf, that the server takes a cluster's
write load: for a minute, one etcd client per connection puts fresh keys
(the prefix and 256 random bytes) of 1 KiB values, at most the load's rate
(s: 50 clients, 150 writes/s; m: 200, 1,000/s; l: 500, 8,000/s; xl: 1,000,
15,000/s). It passes, as etcd's, with no failed request, a throughput above
90% of the rate, no request slower than 0.5 s and a standard deviation of
the latencies within 0.1 s; it prints the figures and PASS, or FAIL and
exits 1. It goes through the etcd API, so it measures the server on its
database and disk, and measures etcd the same way. It refuses a prefix
that holds keys, and deletes the keys it wrote at the end, or when
interrupted (docs/OPERATIONS.md).`
}

// Run runs the check and prints its report.
func (c CheckPerfCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var conn connFlags
	conn.register(fs)
	fs.Lookup("endpoints").Usage = "server address(es): host:port, http://host:port, https://host:port or unix:///path; the clients spread their puts over them"
	loadName := fs.String("load", "s", "the load: s (small), m (medium), l (large) or xl (xLarge), as etcdctl's")
	prefix := fs.String("prefix", "/etcdctl-check-perf/", "the prefix of the keys written, which must hold none; they are deleted at the end")
	autoCompact := fs.Bool("auto-compact", false, "compact at the revision of the keys' deletion, at the end")
	autoDefrag := fs.Bool("auto-defrag", false, "defragment every endpoint at the end")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("check perf takes no arguments, got %q", fs.Args())
	}
	if err := conn.check(); err != nil {
		return err
	}
	load, err := findPerfLoad(*loadName)
	if err != nil {
		return err
	}
	if *prefix == "" {
		return errors.New("--prefix must not be empty: check perf deletes every key under it")
	}
	if checkPerfDuration > 0 {
		load.duration = checkPerfDuration
	}
	cfg, err := conn.etcdConfig()
	if err != nil {
		return err
	}
	run := &perfRun{load: load, prefix: *prefix, timeout: conn.commandTimeout}
	fmt.Fprintf(stderr, "check perf: %s, for %v...\n", run.describe(), load.duration)
	res, err := run.execute(ctx, cfg, *autoCompact, *autoDefrag)
	if err != nil {
		return err
	}
	res.checks = judgePerf(load, res.stats)
	if err := writePerf(stdout, conn.output, run, res); err != nil {
		return err
	}
	if !res.pass() {
		return fmt.Errorf("check perf: %w at load %s: see the report", errPerfFail, load.name)
	}
	return nil
}

// findPerfLoad is the load named name or its long name, as etcdctl's.
func findPerfLoad(name string) (perfLoad, error) {
	var names []string
	for _, l := range perfLoads {
		if name == l.name || name == l.long {
			return l, nil
		}
		names = append(names, l.name+" ("+l.long+")")
	}
	return perfLoad{}, fmt.Errorf("--load %q: want %s", name, strings.Join(names, ", "))
}

// etcdConfig is the etcd client configuration of the endpoints and TLS
// flags, read as the history commands read them.
func (c *connFlags) etcdConfig() (clientv3.Config, error) {
	cfg := clientv3.Config{DialTimeout: c.dialTimeout, Logger: zap.NewNop()}
	var tlsWanted bool
	var server string
	for _, ep := range c.endpoints {
		t, err := parseEndpoint(strings.TrimSpace(ep), c.wantTLS())
		if err != nil {
			return cfg, err
		}
		scheme := "http://"
		if t.tls {
			scheme, tlsWanted = "https://", true
		}
		if after, ok := strings.CutPrefix(t.dial, "unix:"); ok {
			scheme = strings.Replace(scheme, "http", "unix", 1)
			cfg.Endpoints = append(cfg.Endpoints, scheme+strings.TrimPrefix(after, "//"))
		} else {
			cfg.Endpoints = append(cfg.Endpoints, scheme+strings.TrimPrefix(t.dial, "passthrough:///"))
		}
		server = t.server
	}
	if tlsWanted {
		// One endpoint is verified under its own name; several, each
		// under its host's, as gRPC names it from the address.
		if len(c.endpoints) > 1 {
			server = ""
		}
		tc, err := c.tlsConfig(server)
		if err != nil {
			return cfg, err
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

// perfRun is one check perf run.
type perfRun struct {
	load    perfLoad
	prefix  string
	timeout time.Duration // of each request
}

func (r *perfRun) describe() string {
	return fmt.Sprintf("load %s (%s): %d clients, at most %d writes/s, keys of %q and %d bytes, values of %d bytes",
		r.load.name, r.load.long, r.load.clients, r.load.limit, r.prefix, perfKeyBytes, perfValueBytes)
}

// perfResult is what a run measured and did.
type perfResult struct {
	stats   perfStats
	checks  []perfCheck
	deleted int64 // keys deleted at the end
	// compacted is the revision compacted at (0: none); defragmented the
	// endpoints defragmented.
	compacted    int64
	defragmented []string
}

func (r *perfResult) pass() bool {
	for _, c := range r.checks {
		if !c.pass {
			return false
		}
	}
	return true
}

// execute writes the load, deletes its keys and compacts and
// defragments if asked. A run interrupted (ctx ended) deletes its keys
// and returns ctx's error.
func (r *perfRun) execute(ctx context.Context, cfg clientv3.Config, autoCompact, autoDefrag bool) (*perfResult, error) {
	clients := make([]*clientv3.Client, 0, r.load.clients)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range r.load.clients {
		c, err := clientv3.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("check perf: %s: %w", strings.Join(cfg.Endpoints, ","), err)
		}
		clients = append(clients, c)
	}
	if err := connectAll(ctx, clients, cfg.DialTimeout); err != nil {
		return nil, fmt.Errorf("check perf: %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	first := clients[0]
	gctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout+r.timeout)
	resp, err := first.Get(gctx, r.prefix, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("check perf: %s does not answer: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	if len(resp.Kvs) > 0 {
		return nil, fmt.Errorf("check perf: prefix %q holds keys (%q): delete them first (etcdctl del --prefix %s), or give another --prefix", r.prefix, resp.Kvs[0].Key, r.prefix)
	}

	stats := r.writeLoad(ctx, clients)

	// The keys go even when the run was interrupted.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), perfCleanupTimeout)
	defer cancel()
	res := &perfResult{stats: stats}
	del, err := first.Delete(cctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("check perf: delete the keys under %q: %w (delete them with etcdctl del --prefix %s)", r.prefix, err, r.prefix)
	}
	res.deleted = del.Deleted
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("check perf: interrupted; the %d keys written under %q are deleted: %w", del.Deleted, r.prefix, err)
	}
	if autoCompact {
		if _, err := first.Compact(cctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			return nil, fmt.Errorf("check perf: compact at revision %d: %w", del.Header.Revision, err)
		}
		res.compacted = del.Header.Revision
	}
	if autoDefrag {
		for _, ep := range first.Endpoints() {
			if _, err := first.Defragment(cctx, ep); err != nil {
				return nil, fmt.Errorf("check perf: defragment %s: %w", ep, err)
			}
			res.defragmented = append(res.defragmented, ep)
		}
	}
	return res, nil
}

// connectAll connects every client before the load, as etcdctl v3.6's
// clients dial when made: the puts measure the server, not the setting up
// of connections (TLS handshakes included).
func connectAll(ctx context.Context, clients []*clientv3.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			conn := c.ActiveConnection()
			conn.Connect()
			for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
				if !conn.WaitForStateChange(ctx, st) {
					errs[i] = fmt.Errorf("no connection within --dial-timeout %v (%s)", timeout, st)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeLoad puts fresh keys from every client at most at the load's rate for
// its duration (or until ctx ends), and measures each put.
func (r *perfRun) writeLoad(ctx context.Context, clients []*clientv3.Client) perfStats {
	// A burst of one: the puts are spread evenly over each second.
	limiter := rate.NewLimiter(rate.Limit(r.load.limit), 1)
	ops := make(chan clientv3.Op, len(clients))
	lats := make([][]float64, len(clients))
	errs := make([]map[string]int, len(clients))
	value := string(make([]byte, perfValueBytes))
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		errs[i] = map[string]int{}
		wg.Go(func() {
			for op := range ops {
				rctx, cancel := context.WithTimeout(ctx, r.timeout)
				st := time.Now()
				_, err := c.Do(rctx, op)
				took := time.Since(st)
				cancel()
				if err != nil {
					errs[i][err.Error()]++
					continue
				}
				lats[i] = append(lats[i], took.Seconds())
			}
		})
	}
	lctx, cancel := context.WithTimeout(ctx, r.load.duration)
	defer cancel()
	for limiter.Wait(lctx) == nil {
		key := make([]byte, perfKeyBytes)
		binary.BigEndian.PutUint64(key, rand.Uint64())
		select {
		case ops <- clientv3.OpPut(r.prefix+string(key), value):
		case <-lctx.Done():
		}
	}
	close(ops)
	wg.Wait()
	return newPerfStats(lats, errs, time.Since(start))
}
