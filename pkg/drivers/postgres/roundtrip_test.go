package postgres_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
			p.copy(s, c, func() {
				if answered.Swap(false) {
					turns.Add(1)
				}
			})
		}()
		go func() {
			defer p.wg.Done()
			p.copy(c, s, func() { answered.Store(true) })
		}()
	}
}

// copy forwards from src to dst, calling seen before forwarding each read.
func (p *turnProxy) copy(dst, src net.Conn, seen func()) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
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

// A write batch on PostgreSQL costs two round trips: BEGIN with the lock
// and the read of the keys it names, then its writes with COMMIT. Counted
// on the wire, on the writer's connection (the one that turns most).
func TestBatchTakesTwoRoundTrips(t *testing.T) {
	var proxy *turnProxy
	s, _ := openStoreVia(t, func(dsn string) string {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		proxy = startTurnProxy(t, u.Host)
		u.Host = proxy.ln.Addr().String()
		return u.String()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(k string) {
		t.Helper()
		cmp := []*pb.Compare{{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 0}}}
		resp, err := s.Txn(ctx, &pb.TxnRequest{Compare: cmp, Success: []*pb.RequestOp{putOp(k, "v")}})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Succeeded {
			t.Fatalf("create %s: the key exists", k)
		}
	}
	// The first batch on a connection prepares its statements.
	create("warm")
	before := proxy.counts()
	const n = 20
	for i := range n {
		create(fmt.Sprintf("k/%d", i))
	}
	after := proxy.counts()
	var most int64
	for i, c := range after {
		if i < len(before) {
			c -= before[i]
		}
		most = max(most, c)
	}
	if most != 2*n {
		t.Fatalf("%d batches took %d round trips on the busiest connection, want %d (2 each); per connection before %v, after %v", n, most, 2*n, before, after)
	}
}

// A batch whose writes PostgreSQL refuses certainly did not commit, though
// its writes and COMMIT went out together: its requests are retried one
// by one, and only the one the database refuses fails. (Taken for a
// commit of unknown outcome, every request of the batch would fail.)
func TestRefusedBatchIsRetried(t *testing.T) {
	s, dsn := openStore(t)
	db := sqlDB(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.key = 'bad'::bytea THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER refuse_bad BEFORE INSERT OR UPDATE ON current FOR EACH ROW EXECUTE FUNCTION refuse_bad()`); err != nil {
		t.Fatal(err)
	}
	// Hold the batch lock, so that the writer waits in a batch of its own
	// (the first put) while the next two queue up behind it and then go
	// in one batch.
	lock, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `UPDATE meta SET value = value WHERE name = 'rev'`); err != nil {
		t.Fatal(err)
	}
	put := func(k string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(k, "v")}})
			done <- err
		}()
		return done
	}
	first := put("first")
	time.Sleep(200 * time.Millisecond)
	good, bad := put("good"), put("bad")
	time.Sleep(200 * time.Millisecond)
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := <-good; err != nil {
		t.Fatalf("a put batched with one the database refuses failed: %v", err)
	}
	if err := <-bad; err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("the refused put: got %v, want the database's refusal", err)
	}
	checkTables(t, dsn)
}
