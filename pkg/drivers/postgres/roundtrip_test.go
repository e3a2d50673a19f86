package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// turnProxy forwards TCP connections to PostgreSQL and counts, per
// connection, the client's turns: each time it sends after the server
// last sent, which is one round trip however the bytes are split.
type turnProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	conns    []*atomic.Int64
	wg       sync.WaitGroup
	// listened: a client has sent LISTEN (the store's tailer).
	listened atomic.Bool
}

func startTurnProxy(t *testing.T, upstream string) *turnProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &turnProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *turnProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		turns := &atomic.Int64{}
		p.mu.Lock()
		p.conns = append(p.conns, turns)
		p.mu.Unlock()
		var answered atomic.Bool
		answered.Store(true)
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			p.copy(s, c, func(b []byte) {
				if answered.Swap(false) {
					turns.Add(1)
				}
				if bytes.Contains(b, []byte("LISTEN ")) {
					p.listened.Store(true)
				}
			})
		}()
		go func() {
			defer p.wg.Done()
			p.copy(c, s, func([]byte) { answered.Store(true) })
		}()
	}
}

// copy forwards from src to dst, calling seen with each read before
// forwarding it.
func (p *turnProxy) copy(dst, src net.Conn, seen func([]byte)) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// settle waits until the store's tailer listens and no connection has
// turned for 100 ms. When its LISTEN connection comes up, some time after
// Open, the tailer catches up on everything (meta, leases, retention
// floors) on a reader's connection: six round trips, which a count taken
// meanwhile would find on the busiest connection instead of the writer's.
func (p *turnProxy) settle(t *testing.T) {
	t.Helper()
	const quiet = 100 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	last, since := p.counts(), time.Now()
	for !p.listened.Load() || time.Since(since) < quiet {
		if time.Now().After(deadline) {
			t.Fatalf("the store's connections did not fall quiet in 10 s (LISTEN sent: %v)", p.listened.Load())
		}
		time.Sleep(10 * time.Millisecond)
		if now := p.counts(); !slices.Equal(now, last) {
			last, since = now, time.Now()
		}
	}
}

// counts is every connection's turns so far.
func (p *turnProxy) counts() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int64, len(p.conns))
	for i, c := range p.conns {
		out[i] = c.Load()
	}
	return out
}

// openStoreCounted opens a store whose connections go through a turnProxy.
func openStoreCounted(t *testing.T) (*mvcc.Store, string, *turnProxy) {
	var proxy *turnProxy
	s, dsn := openStoreVia(t, func(dsn string) string {
		var via string
		via, proxy = proxied(t, dsn)
		return via
	})
	return s, dsn, proxy
}

// proxied is dsn through a new turnProxy.
func proxied(t *testing.T, dsn string) (string, *turnProxy) {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startTurnProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	return u.String(), proxy
}

// openReplica opens another store (a replica, or the same database again)
// on dsn, closed when the test ends.
func openReplica(t *testing.T, dsn string) *mvcc.Store {
	t.Helper()
	d, err := postgres.New(dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// turns runs f and returns the round trips it took on the busiest
// connection: the writer's. It waits first for the store's background
// reads to end (settle).
func (p *turnProxy) turns(t *testing.T, f func()) int64 {
	t.Helper()
	p.settle(t)
	before := p.counts()
	f()
	after := p.counts()
	var most int64
	for i, c := range after {
		if i < len(before) {
			c -= before[i]
		}
		most = max(most, c)
	}
	return most
}

func modIs(k string, rev int64) []*pb.Compare {
	return []*pb.Compare{{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}}
}

// txn runs a Txn that must not fail.
func txn(t *testing.T, s *mvcc.Store, r *pb.TxnRequest) *pb.TxnResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := s.Txn(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A write batch that must read costs two round trips: BEGIN with the lock
// and the read of the keys it names, then its writes with COMMIT. Counted
// on the wire, on the writer's connection (the one that turns most). A
// put of a key the writer has not seen, with no compare saying it is
// new, must read its row.
func TestBatchTakesTwoRoundTrips(t *testing.T) {
	s, _, proxy := openStoreCounted(t)
	// The first batch on a connection prepares its statements.
	txn(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("warm", "v")}})
	const n = 20
	got := proxy.turns(t, func() {
		for i := range n {
			txn(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(fmt.Sprintf("k/%d", i), "v")}})
		}
	})
	if got != 2*n {
		t.Fatalf("%d batches took %d round trips on the busiest connection, want %d (2 each)", n, got, 2*n)
	}
}

// warm prepares the writer's statements (a batch's first use of one is a
// round trip more) and runs enough batches that the next ones assume.
func warm(t *testing.T, s *mvcc.Store) {
	t.Helper()
	txn(t, s, &pb.TxnRequest{Compare: modIs("warm", 1), Failure: []*pb.RequestOp{rangeOp("warm", "")}})
	for i := range 8 {
		txn(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(fmt.Sprintf("warm/%d", i), "v")}})
	}
}

// A batch that names only rows the writer knows, or keys it creates, is
// one round trip (ADR-007, "One round trip"): creates and updates as
// kube-apiserver sends them. An update whose compare fails reads the key
// in its Else branch: that begins the usual transaction, and the answer
// is the database's.
func TestBatchTakesOneRoundTripWhenItKnowsItsRows(t *testing.T) {
	s, dsn, proxy := openStoreCounted(t)
	warm(t, s)
	const n = 20
	revs := make([]int64, n)
	got := proxy.turns(t, func() {
		for i := range n {
			k := fmt.Sprintf("k/%d", i)
			r := txn(t, s, &pb.TxnRequest{Compare: modIs(k, 0), Success: []*pb.RequestOp{putOp(k, "v1")}})
			if !r.Succeeded {
				t.Fatalf("create %s: the key exists", k)
			}
			revs[i] = r.Header.Revision
		}
	})
	if got != n {
		t.Fatalf("%d creates took %d round trips, want %d (1 each)", n, got, n)
	}
	got = proxy.turns(t, func() {
		for i := range n {
			k := fmt.Sprintf("k/%d", i)
			r := txn(t, s, &pb.TxnRequest{Compare: modIs(k, revs[i]), Success: []*pb.RequestOp{putOp(k, "v2")}, Failure: []*pb.RequestOp{rangeOp(k, "")}})
			if !r.Succeeded {
				t.Fatalf("update %s at %d: compare failed", k, revs[i])
			}
		}
	})
	if got != n {
		t.Fatalf("%d updates took %d round trips, want %d (1 each)", n, got, n)
	}
	var r *pb.TxnResponse
	got = proxy.turns(t, func() {
		r = txn(t, s, &pb.TxnRequest{Compare: modIs("k/0", revs[0]), Success: []*pb.RequestOp{putOp("k/0", "v3")}, Failure: []*pb.RequestOp{rangeOp("k/0", "")}})
	})
	if r.Succeeded {
		t.Fatalf("an update at a stale revision succeeded")
	}
	kvs := r.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 || string(kvs[0].Value) != "v2" {
		t.Fatalf("the failed update's Get answered %v, want k/0 = v2", kvs)
	}
	if got != 3 {
		t.Fatalf("an update whose compare failed took %d round trips, want 3 (the lock with the read, the Get, the COMMIT)", got)
	}
	checkTables(t, dsn)
}

// Another replica's writes since this one's last batch are not assumed
// away: once the tailer has read them, the batch does not assume (the
// state it would assume is behind what this process has shown, ADR-027)
// and reads the database in its three round trips; a batch that assumed
// before the tailer read them is refused under the lock (batch_replica_assume.go).
// Every answer is the database's.
func TestAssumptionCheckedUnderTheLock(t *testing.T) {
	a, dsn, proxy := openStoreCounted(t)
	b := openReplica(t, dsn)
	calm := func() {
		t.Helper()
		warm(t, a)
	}
	calm()
	created := txn(t, a, &pb.TxnRequest{Compare: modIs("k", 0), Success: []*pb.RequestOp{putOp("k", "a1")}}).Header.Revision
	calm()

	// follow waits until a's tailer has read what b committed: its reads
	// are round trips on connections of their own.
	follow := func(rev int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); a.Rev() < rev; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a is at revision %d, b committed %d", a.Rev(), rev)
			}
		}
	}
	// b changes k, which a remembers at its create.
	r := txn(t, b, &pb.TxnRequest{Compare: modIs("k", created), Success: []*pb.RequestOp{putOp("k", "b1")}})
	if !r.Succeeded {
		t.Fatal("b's update of k failed")
	}
	follow(r.Header.Revision)
	got := proxy.turns(t, func() {
		r = txn(t, a, &pb.TxnRequest{Compare: modIs("k", created), Success: []*pb.RequestOp{putOp("k", "a2")}, Failure: []*pb.RequestOp{rangeOp("k", "")}})
	})
	if r.Succeeded {
		t.Fatal("a's update at the revision it remembered succeeded over b's")
	}
	if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "b1" {
		t.Fatalf("a's failed update read %v, want k = b1", kvs)
	}
	if got != 3 {
		t.Fatalf("the batch after b's write took %d round trips, want 3 (it assumes nothing behind what the tailer read)", got)
	}

	// b creates x, which a has never seen: once a's tailer has read it,
	// a's create does not assume it absent.
	calm()
	follow(txn(t, b, &pb.TxnRequest{Compare: modIs("x", 0), Success: []*pb.RequestOp{putOp("x", "b")}}).Header.Revision)
	got = proxy.turns(t, func() {
		r = txn(t, a, &pb.TxnRequest{Compare: modIs("x", 0), Success: []*pb.RequestOp{putOp("x", "a")}})
	})
	if r.Succeeded {
		t.Fatal("a created x over b's")
	}
	if got != 2 {
		t.Fatalf("the create after b's took %d round trips, want 2 (the lock with the read, the COMMIT: nothing assumed)", got)
	}
	checkTables(t, dsn)
}

// A create of a key that exists but that the writer does not remember (it
// was written before this process started) fails the check on its row
// alone: the batch runs again (3 round trips), and since meta held, what
// the writer remembers still holds and the next batches are one round
// trip again, not two until it is calm.
func TestAssumedRowMissKeepsTheRest(t *testing.T) {
	before, dsn := openStore(t)
	txn(t, before, &pb.TxnRequest{Compare: modIs("old", 0), Success: []*pb.RequestOp{putOp("old", "v")}})
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}
	via, proxy := proxied(t, dsn)
	s := openReplica(t, via)
	warm(t, s)
	var r *pb.TxnResponse
	got := proxy.turns(t, func() {
		r = txn(t, s, &pb.TxnRequest{Compare: modIs("old", 0), Success: []*pb.RequestOp{putOp("old", "again")}})
	})
	if r.Succeeded {
		t.Fatal("a create of an existing key succeeded")
	}
	if got != 3 {
		t.Fatalf("the create that assumed old absent took %d round trips, want 3 (1 refused, then 2)", got)
	}
	got = proxy.turns(t, func() {
		for i := range 5 {
			k := fmt.Sprintf("new/%d", i)
			txn(t, s, &pb.TxnRequest{Compare: modIs(k, 0), Success: []*pb.RequestOp{putOp(k, "v")}})
		}
	})
	if got != 5 {
		t.Fatalf("5 creates after a row's miss took %d round trips, want 5 (1 each)", got)
	}
	checkTables(t, dsn)
}
