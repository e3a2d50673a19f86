package crash

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	prefix       = "/crash/"
	numWriters   = 16
	keysPerWrite = 8    // kube-style keys per writer (create/update/delete)
	pairsPerW    = 2    // two-key Txn pairs per writer
	maxOpsRound  = 1500 // ops per writer per server run, bounds the data set
	opTimeout    = 10 * time.Second
	valuePad     = 96
)

// kvState is one key's state: what Range returns, or what the model expects.
type kvState struct {
	value                string
	mod, create, version int64
}

func (s kvState) String() string {
	return fmt.Sprintf("value %s mod_revision %d create_revision %d version %d", quoteVal(s.value), s.mod, s.create, s.version)
}

// putOn is the state of a key after a put of value at rev on top of old.
func putOn(old kvState, exists bool, value string, rev int64) kvState {
	if !exists {
		return kvState{value: value, mod: rev, create: rev, version: 1}
	}
	return kvState{value: value, mod: rev, create: old.create, version: old.version + 1}
}

type opKind int

const (
	opCreate opKind = iota // Txn If(mod==0) Then(Put)
	opUpdate               // Txn If(mod==R) Then(Put) Else(Range)
	opDelete               // Txn If(mod==R) Then(DeleteRange) Else(Range)
	opPut                  // plain Put of a new key
	opPair                 // Txn If(mod(a)==R) Then(Put a, Put b) Else(Range a, Range b)
)

func (k opKind) String() string {
	return [...]string{"create Txn", "update Txn", "delete Txn", "Put", "two-key Txn"}[k]
}

// op is one write a writer sent.
type op struct {
	writer int
	round  int
	kind   opKind
	keys   []string
	value  string    // "" for a delete
	base   []kvState // the keys' states before the op, as the writer knew them
	baseOK []bool    // whether each key existed before the op

	acked   bool  // a response arrived
	applied bool  // acked with its compare true, or found applied after restart
	rev     int64 // the write's revision once known
	err     error // why no response arrived

	watchChecked bool
}

func (o *op) String() string {
	return fmt.Sprintf("%s by writer %d in run %d on %s value %s", o.kind, o.writer, o.round, strings.Join(o.keys, ","), quoteVal(o.value))
}

// writer owns its keys: nobody else writes them, so its view of them is exact
// as long as every acknowledged write is durable.
type writer struct {
	id    int
	rng   *rand.Rand
	seq   int
	state map[string]kvState // the writer's keys as it knows them

	ops     []*op // acknowledged ops of the current run, in order
	pending *op   // the op without a response, at most one (the writer stops then)
	lastAck int64 // its last acknowledged revision
}

func newWriter(id int, seed uint64) *writer {
	return &writer{id: id, rng: rand.New(rand.NewPCG(seed, uint64(id)+1)), state: map[string]kvState{}}
}

func (w *writer) value(round int) string {
	w.seq++
	tag := fmt.Sprintf("run%d/w%02d/op%d", round, w.id, w.seq)
	return tag + "|" + strings.Repeat("x", valuePad)
}

// next picks the writer's next op against its current view.
func (w *writer) next(round int) *op {
	o := &op{writer: w.id, round: round}
	r := w.rng.Float64()
	switch {
	case r < 0.45:
		k := fmt.Sprintf("%sw%02d/obj/%d", prefix, w.id, w.rng.IntN(keysPerWrite))
		cur, ok := w.state[k]
		o.keys, o.base, o.baseOK = []string{k}, []kvState{cur}, []bool{ok}
		switch {
		case !ok:
			o.kind = opCreate
		case w.rng.Float64() < 0.15:
			o.kind = opDelete
		default:
			o.kind = opUpdate
		}
	case r < 0.75:
		o.kind = opPut
		o.keys = []string{fmt.Sprintf("%sw%02d/put/%d", prefix, w.id, w.seq+1)}
		o.base, o.baseOK = []kvState{{}}, []bool{false}
	default:
		o.kind = opPair
		i := w.rng.IntN(pairsPerW)
		a, b := fmt.Sprintf("%sw%02d/pair%d/a", prefix, w.id, i), fmt.Sprintf("%sw%02d/pair%d/b", prefix, w.id, i)
		ca, oka := w.state[a]
		cb, okb := w.state[b]
		o.keys, o.base, o.baseOK = []string{a, b}, []kvState{ca, cb}, []bool{oka, okb}
	}
	if o.kind != opDelete {
		o.value = w.value(round)
	}
	return o
}

// do sends o and returns the response's revision, whether the compare held,
// and, when it did not, what the Else branch read.
func do(ctx context.Context, cli *clientv3.Client, o *op) (rev int64, ok bool, seen string, err error) {
	k := o.keys[0]
	var resp *clientv3.TxnResponse
	switch o.kind {
	case opPut:
		pr, err := cli.Put(ctx, k, o.value)
		if err != nil {
			return 0, false, "", err
		}
		return pr.Header.Revision, true, "", nil
	case opCreate:
		resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, o.value)).Commit()
	case opUpdate:
		resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", o.base[0].mod)).
			Then(clientv3.OpPut(k, o.value)).Else(clientv3.OpGet(k)).Commit()
	case opDelete:
		resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", o.base[0].mod)).
			Then(clientv3.OpDelete(k)).Else(clientv3.OpGet(k)).Commit()
	case opPair:
		resp, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", o.base[0].mod)).
			Then(clientv3.OpPut(o.keys[0], o.value), clientv3.OpPut(o.keys[1], o.value)).
			Else(clientv3.OpGet(o.keys[0]), clientv3.OpGet(o.keys[1])).Commit()
	}
	if err != nil {
		return 0, false, "", err
	}
	if !resp.Succeeded {
		var parts []string
		for _, r := range resp.Responses {
			if rr := r.GetResponseRange(); rr != nil {
				for _, kv := range rr.Kvs {
					parts = append(parts, fmt.Sprintf("%s: %s", kv.Key, kvState{string(kv.Value), kv.ModRevision, kv.CreateRevision, kv.Version}))
				}
			}
		}
		if len(parts) == 0 {
			parts = append(parts, "(nothing read)")
		}
		seen = strings.Join(parts, "; ")
	}
	return resp.Header.Revision, resp.Succeeded, seen, nil
}

// run sends ops one at a time until stop is closed, an op gets no response,
// or maxOpsRound ops were sent.
func (w *writer) run(cli *clientv3.Client, round int, stop <-chan struct{}, killed *atomic.Bool, f *findings, errs *errCounter) {
	w.ops, w.pending = nil, nil
	for range maxOpsRound {
		select {
		case <-stop:
			return
		default:
		}
		o := w.next(round)
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		rev, ok, seen, err := do(ctx, cli, o)
		cancel()
		if err != nil {
			o.err = err
			w.pending = o
			pre := !killed.Load()
			errs.add(pre, err)
			if pre && status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
				f.add("write failed while the server was up", "%s: %v", o, err)
			}
			return
		}
		o.acked, o.rev = true, rev
		if rev <= w.lastAck {
			f.add("acknowledged revisions not increasing", "writer %d: %s acknowledged at revision %d, after its previous write was acknowledged at %d", w.id, o, rev, w.lastAck)
		}
		w.lastAck = max(w.lastAck, rev)
		if !ok {
			// Only this writer writes these keys, so a failed compare means
			// the store does not hold what it acknowledged.
			f.add("compare failed against an acknowledged state", "%s: expected mod_revision %d (%s); the store read: %s", o, o.base[0].mod, o.base[0], seen)
			w.ops = append(w.ops, o)
			return // the view is wrong; the next restart resyncs it
		}
		o.applied = true
		w.apply(o)
		w.ops = append(w.ops, o)
	}
}

// apply records an applied op in the writer's view.
func (w *writer) apply(o *op) {
	for i, k := range o.keys {
		if o.kind == opDelete {
			delete(w.state, k)
			continue
		}
		w.state[k] = putOn(o.base[i], o.baseOK[i], o.value, o.rev)
	}
}

// errCounter counts write errors by when they happened and their gRPC code.
type errCounter struct {
	mu sync.Mutex
	m  map[string]int
}

func (e *errCounter) add(preKill bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]int{}
	}
	when := "after kill"
	if preKill {
		when = "before kill"
	}
	code := status.Code(err)
	if errors.Is(err, context.Canceled) {
		code = codes.Canceled
	}
	e.m[fmt.Sprintf("%s/%v", when, code)]++
}

func (e *errCounter) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var parts []string
	for k, n := range e.m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// findings collects violations by kind; each kind keeps its first examples.
type findings struct {
	mu     sync.Mutex
	order  []string
	count  map[string]int
	sample map[string][]string
}

const samplesPerKind = 8

func newFindings() *findings {
	return &findings{count: map[string]int{}, sample: map[string][]string{}}
}

func (f *findings) add(kind, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count[kind] == 0 {
		f.order = append(f.order, kind)
	}
	f.count[kind]++
	if len(f.sample[kind]) < samplesPerKind {
		f.sample[kind] = append(f.sample[kind], fmt.Sprintf(format, args...))
	}
}

func (f *findings) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.count {
		n += c
	}
	return n
}

func (f *findings) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, kind := range f.order {
		fmt.Fprintf(&b, "\n%s: %d\n", kind, f.count[kind])
		for _, s := range f.sample[kind] {
			fmt.Fprintf(&b, "    %s\n", s)
		}
		if n := f.count[kind] - len(f.sample[kind]); n > 0 {
			fmt.Fprintf(&b, "    ... and %d more\n", n)
		}
	}
	return b.String()
}
