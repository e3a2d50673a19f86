package linearizability

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// Prefix holds every key the workload touches: two groups of four keys,
// each group a prefix DeleteRange and Range work on. The groups are
// disjoint, so the keys a DeleteRange removed name its group.
const Prefix = "/lin/"

var (
	groups = []string{Prefix + "a/", Prefix + "b/"}
	keys   = []string{
		Prefix + "a/0", Prefix + "a/1", Prefix + "a/2", Prefix + "a/3",
		Prefix + "b/0", Prefix + "b/1", Prefix + "b/2", Prefix + "b/3",
	}
)

// Config shapes a recorded run.
type Config struct {
	// Endpoints are the servers: client i talks to Endpoints[i % n], and
	// each endpoint has a watcher of its own.
	Endpoints []string
	TLS       *tls.Config
	// Clients is how many clients run operations concurrently (default 8);
	// each stops after OpsPerClient operations (default 300) or at Stop.
	Clients      int
	OpsPerClient int
	// Seed makes the operations chosen repeatable.
	Seed uint64
	// ShortTimeouts is the share of writes sent with a deadline of a few
	// milliseconds, so that some outcomes are unknown even without a fault
	// (default 0.03; negative: none).
	ShortTimeouts float64
}

// Op is one recorded operation. Times are nanoseconds since the run
// started; an unknown outcome has no return time.
type Op struct {
	Client   int
	Endpoint int
	Req      Request
	Resp     Response
	Call     int64
	Return   int64
	Err      string // why the outcome is unknown
}

func (o Op) String() string {
	s := fmt.Sprintf("client %d (endpoint %d) %v -> %v [%.3fs", o.Client, o.Endpoint, o.Req, o.Resp, float64(o.Call)/1e9)
	if !o.Resp.Unknown {
		s += fmt.Sprintf(", %.3fs", float64(o.Return)/1e9)
	}
	s += "]"
	if o.Err != "" {
		s += " " + o.Err
	}
	return s
}

// History is everything a run recorded.
type History struct {
	Init    State
	Ops     []Op
	Watches []*WatchLog
	// Final is the store's revision when the run stopped: every watcher
	// was followed up to it.
	Final int64
}

// Recorder runs the workload and records it.
type Recorder struct {
	cfg   Config
	start time.Time
	init  State
	stop  atomic.Bool
	wg    sync.WaitGroup
	acked atomic.Int64

	mu     sync.Mutex
	ops    []Op
	failed []Failure

	watchers []*watcher
	clients  []*clientv3.Client
}

// Start reads the store's state under Prefix (the workload must be the only
// writer of the store from then on) and starts the watchers and clients.
func Start(ctx context.Context, cfg Config) (*Recorder, error) {
	if cfg.Clients == 0 {
		cfg.Clients = 8
	}
	if cfg.OpsPerClient == 0 {
		cfg.OpsPerClient = 300
	}
	if cfg.ShortTimeouts == 0 {
		cfg.ShortTimeouts = 0.03
	}
	r := &Recorder{cfg: cfg}
	cli, err := r.client(0)
	if err != nil {
		return nil, err
	}
	resp, err := cli.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		r.close()
		return nil, fmt.Errorf("linearizability: reading the initial state: %w", err)
	}
	r.init = State{Rev: resp.Header.Revision, KVs: map[string]KV{}}
	for _, kv := range resp.Kvs {
		r.init.KVs[string(kv.Key)] = toKV(kv)
	}
	r.start = time.Now()
	for i := range cfg.Endpoints {
		wcli, err := r.client(i)
		if err != nil {
			r.close()
			return nil, err
		}
		r.watchers = append(r.watchers, startWatcher(r, wcli, i, r.init.Rev+1))
	}
	for c := range cfg.Clients {
		cli, err := r.client(c % len(cfg.Endpoints))
		if err != nil {
			r.stop.Store(true)
			r.wg.Wait()
			r.close()
			return nil, err
		}
		r.wg.Add(1)
		go r.runClient(cli, c)
	}
	return r, nil
}

func (r *Recorder) client(endpoint int) (*clientv3.Client, error) {
	cli, err := framework.NewTLSClient(r.cfg.TLS, r.cfg.Endpoints[endpoint])
	if err != nil {
		return nil, fmt.Errorf("linearizability: client of %s: %w", r.cfg.Endpoints[endpoint], err)
	}
	r.mu.Lock()
	r.clients = append(r.clients, cli)
	r.mu.Unlock()
	return cli, nil
}

func (r *Recorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clients {
		_ = c.Close()
	}
	r.clients = nil
}

// now is the time since the run started, in nanoseconds.
func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// Acked is how many writes have been acknowledged so far.
func (r *Recorder) Acked() int64 { return r.acked.Load() }

// Ops is how many operations have been recorded so far.
func (r *Recorder) Ops() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Failure is an operation that failed, as the client saw it.
type Failure struct {
	Time int64 // when it returned, since the run started
	Op   Request
	Err  string
}

// Failures are the operations that failed since the run started, reads
// included, oldest first.
func (r *Recorder) Failures() []Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Failure(nil), r.failed...)
}

// Now is the time since the run started, in the unit of Op and Failure.
func (r *Recorder) Now() int64 { return r.now() }

// opTimeout bounds an operation that is not sent with a short deadline.
const opTimeout = 5 * time.Second

func (r *Recorder) runClient(cli *clientv3.Client, id int) {
	defer r.wg.Done()
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(id)))
	c := &client{id: id, rng: rng, seen: map[string]KV{}}
	for i := 0; i < r.cfg.OpsPerClient && !r.stop.Load(); i++ {
		req := c.next(i)
		timeout := opTimeout
		if req.Kind.writes() && rng.Float64() < r.cfg.ShortTimeouts {
			timeout = time.Duration(1+rng.IntN(5)) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		op := Op{Client: id, Endpoint: id % len(r.cfg.Endpoints), Req: req, Call: r.now()}
		resp, err := do(ctx, cli, req)
		op.Return = r.now()
		cancel()
		if err != nil {
			r.mu.Lock()
			r.failed = append(r.failed, Failure{Time: op.Return, Op: req, Err: err.Error()})
			r.mu.Unlock()
			// A read that failed tells nothing; a write may or may not
			// have been applied.
			if req.Kind.writes() {
				op.Resp, op.Err, op.Return = Response{Unknown: true}, err.Error(), 0
				r.record(op)
			}
			// Let a server that is down come back rather than pile up
			// unknown outcomes.
			time.Sleep(time.Duration(50+rng.IntN(100)) * time.Millisecond)
			continue
		}
		op.Resp = resp
		if req.Kind.writes() {
			r.acked.Add(1)
		}
		c.learn(req, resp)
		r.record(op)
	}
}

func (r *Recorder) record(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// client chooses operations, mostly on keys it has seen, so that its
// Txns' compares hold often enough to write.
type client struct {
	id   int
	rng  *rand.Rand
	seen map[string]KV // what this client last read or wrote of each key
}

func (c *client) next(i int) Request {
	key := keys[c.rng.IntN(len(keys))]
	value := fmt.Sprintf("c%d.%d", c.id, i)
	switch n := c.rng.IntN(100); {
	case n < 25:
		return Request{Kind: Get, Key: key}
	case n < 35:
		return Request{Kind: Range, Key: groups[c.rng.IntN(len(groups))], Limit: int64(c.rng.IntN(4))}
	case n < 65:
		return Request{Kind: Put, Key: key, Value: value}
	case n < 73:
		return Request{Kind: Delete, Key: key}
	case n < 75:
		return Request{Kind: DeleteRange, Key: groups[c.rng.IntN(len(groups))]}
	default:
		kv := c.seen[key]
		if n < 80 {
			return Request{Kind: Txn, Key: key, Value: value, ByValue: true, Expect: kv.Value}
		}
		return Request{Kind: Txn, Key: key, Value: value, ModRev: kv.ModRev}
	}
}

func (c *client) learn(req Request, resp Response) {
	switch req.Kind {
	case Get, Txn:
		if req.Kind == Txn && resp.Succeeded {
			c.seen[req.Key] = KV{Key: req.Key, Value: req.Value, ModRev: resp.Rev}
			return
		}
		delete(c.seen, req.Key)
		for _, kv := range resp.KVs {
			c.seen[kv.Key] = kv
		}
	case Put:
		c.seen[req.Key] = KV{Key: req.Key, Value: req.Value, ModRev: resp.Rev}
	case Delete:
		delete(c.seen, req.Key)
	}
}

// do sends req through the etcd client.
func do(ctx context.Context, cli *clientv3.Client, req Request) (Response, error) {
	switch req.Kind {
	case Get:
		r, err := cli.Get(ctx, req.Key)
		if err != nil {
			return Response{}, err
		}
		return Response{Rev: r.Header.Revision, KVs: toKVs(r.Kvs)}, nil
	case Range:
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if req.Limit > 0 {
			opts = append(opts, clientv3.WithLimit(req.Limit))
		}
		r, err := cli.Get(ctx, req.Key, opts...)
		if err != nil {
			return Response{}, err
		}
		return Response{Rev: r.Header.Revision, KVs: toKVs(r.Kvs), Count: r.Count, More: r.More}, nil
	case Put:
		r, err := cli.Put(ctx, req.Key, req.Value)
		if err != nil {
			return Response{}, err
		}
		return Response{Rev: r.Header.Revision}, nil
	case Delete, DeleteRange:
		var opts []clientv3.OpOption
		if req.Kind == DeleteRange {
			opts = append(opts, clientv3.WithPrefix())
		}
		r, err := cli.Delete(ctx, req.Key, opts...)
		if err != nil {
			return Response{}, err
		}
		return Response{Rev: r.Header.Revision, Deleted: r.Deleted}, nil
	case Txn:
		cmp := clientv3.Compare(clientv3.ModRevision(req.Key), "=", req.ModRev)
		if req.ByValue {
			cmp = clientv3.Compare(clientv3.Value(req.Key), "=", req.Expect)
		}
		r, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(req.Key, req.Value)).Else(clientv3.OpGet(req.Key)).Commit()
		if err != nil {
			return Response{}, err
		}
		resp := Response{Rev: r.Header.Revision, Succeeded: r.Succeeded}
		if !r.Succeeded {
			if len(r.Responses) != 1 || r.Responses[0].GetResponseRange() == nil {
				return Response{}, errors.New("txn: the else branch did not answer with one range")
			}
			resp.KVs = toKVs(r.Responses[0].GetResponseRange().Kvs)
		}
		return resp, nil
	}
	return Response{}, fmt.Errorf("unknown operation %v", req.Kind)
}

func toKV(kv *mvccpb.KeyValue) KV {
	return KV{Key: string(kv.Key), Value: string(kv.Value), ModRev: kv.ModRevision, CreateRev: kv.CreateRevision, Version: kv.Version}
}

func toKVs(kvs []*mvccpb.KeyValue) []KV {
	out := make([]KV, len(kvs))
	for i, kv := range kvs {
		out[i] = toKV(kv)
	}
	return out
}

// Stop stops the clients, reads the store's revision from every endpoint
// (retrying for up to a minute: a fault may have just ended), follows every
// watcher up to it, and returns the history.
func (r *Recorder) Stop(ctx context.Context) (*History, error) {
	r.stop.Store(true)
	r.wg.Wait()
	defer r.close()
	h := &History{Init: r.init}
	r.mu.Lock()
	h.Ops = append([]Op(nil), r.ops...)
	r.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for i := range r.cfg.Endpoints {
		cli, err := r.client(i)
		if err != nil {
			return nil, err
		}
		for {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := cli.Get(gctx, Prefix+"final")
			cancel()
			if err == nil {
				h.Final = max(h.Final, resp.Header.Revision)
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("linearizability: reading the final revision of %s: %w", r.cfg.Endpoints[i], err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, w := range r.watchers {
		h.Watches = append(h.Watches, w.follow(ctx, h.Final))
	}
	return h, nil
}
