package server

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// TestCheckSize holds checkSize to etcd's own rule: a write is refused when
// the InternalRaftRequest etcd makes of it (etcdserver's
// processInternalRaftRequestOnce), with a request ID from etcd's
// idutil.Generator, is over the limit. The member is etcd's default one
// (8e9e05c52164694d), whatever the store's own member ID.
func TestCheckSize(t *testing.T) {
	const limit = DefaultMaxRequestBytes
	ms := uint64(time.Now().UnixMilli())
	// etcd's generator: the member's low 16 bits, then 40 bits of the time
	// in milliseconds, then a counter of 8 bits.
	var etcdDefaultMember uint64 = 0x8e9e05c52164694d
	id := uint64(uint16(etcdDefaultMember))<<48 | (ms&(1<<40-1))<<8 + 1
	for _, member := range []uint64{0x10000, 0x1, 0xe1, 0x1234, 0x7fff, 0x8000, 0xabcdef12345fffff, etcdDefaultMember} {
		s := New(Config{Backend: &fakeBackend{member: member}})
		for d := -40; d <= 4; d++ {
			p := &pb.PutRequest{Key: []byte("k")}
			p.Value = bytes.Repeat([]byte("v"), limit+d-proto.Size(p)-3)
			for _, m := range []proto.Message{p, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: p}}}}} {
				entry := &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: id}}
				switch r := m.(type) {
				case *pb.PutRequest:
					entry.Put = r
				case *pb.TxnRequest:
					entry.Txn = r
				}
				etcdRefuses := proto.Size(entry) > limit
				if refused := s.checkSize(m) != nil; refused != etcdRefuses {
					t.Fatalf("member %x, %T of %d bytes (entry %d): refused %v, etcd refuses %v", member, m, proto.Size(m), proto.Size(entry), refused, etcdRefuses)
				}
			}
		}
	}
	// The case: a 48-byte key.
	s := New(Config{Backend: &fakeBackend{member: 0xffff}})
	key := bytes.Repeat([]byte("k"), 48)
	for value, refused := range map[int]bool{1_572_793: false, 1_572_794: true} {
		if got := s.checkSize(&pb.PutRequest{Key: key, Value: make([]byte, value)}) != nil; got != refused {
			t.Errorf("a Put of a 48-byte key and a %d-byte value: refused %v, want %v", value, got, refused)
		}
	}
}

func TestReadOnly(t *testing.T) {
	rng := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k")}}}
	nested := &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{rng}}}}
	for _, tc := range []struct {
		name string
		r    *pb.TxnRequest
		want bool
	}{
		{"empty", &pb.TxnRequest{}, true},
		{"compares and ranges", &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("k")}}, Success: []*pb.RequestOp{rng}, Failure: []*pb.RequestOp{rng}}, true},
		{"a put in failure", &pb.TxnRequest{Success: []*pb.RequestOp{rng}, Failure: []*pb.RequestOp{put}}, false},
		// etcd's IsTxnReadonly counts a nested transaction as a write.
		{"a nested read", &pb.TxnRequest{Success: []*pb.RequestOp{nested}}, false},
		{"an empty op", &pb.TxnRequest{Success: []*pb.RequestOp{{}}}, false},
	} {
		if got := readOnly(tc.r); got != tc.want {
			t.Errorf("%s: readOnly %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRequestsReuseGoroutines checks that the server's options run unary
// requests on the stream workers: sequential requests land on at most
// streamWorkers() goroutines, where a goroutine per request would use one
// each (and grow a fresh stack each time).
func TestRequestsReuseGoroutines(t *testing.T) {
	s := New(Config{Backend: &fakeBackend{}})
	var mu sync.Mutex
	seen := map[string]bool{}
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		buf := make([]byte, 64)
		id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf, false)]), "goroutine "), " ")
		mu.Lock()
		seen[id] = true
		mu.Unlock()
		return handler(ctx, req)
	}
	client := healthClient(t, append(s.GRPCOptions(), grpc.ChainUnaryInterceptor(record)))
	calls := 2*streamWorkers() + 1
	run := func() {
		for i := 0; i < calls; i++ {
			if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
	}
	// gRPC hands a request to a goroutine of its own when no worker waits
	// for one, as at start, before the workers are first scheduled (on a
	// busy machine, tens of milliseconds): only requests after that count.
	run()
	mu.Lock()
	clear(seen)
	mu.Unlock()
	run()
	if len(seen) > streamWorkers() {
		t.Fatalf("%d sequential requests ran on %d goroutines, want at most %d (the stream workers)", calls, len(seen), streamWorkers())
	}
}

// TestServerSendsNoFlowControlPings checks that the server's options turn
// off gRPC's bandwidth-delay estimate, which pings the client after each
// request that follows an answered ping: with one request at a time, every
// request. It counts the PING frames (not acks) the server sends over
// sequential requests.
func TestServerSendsNoFlowControlPings(t *testing.T) {
	s := New(Config{Backend: &fakeBackend{}})
	var frames, pings atomic.Int64
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &pingCounter{Conn: c, frames: &frames, pings: &pings}, nil
	}
	client := healthClient(t, s.GRPCOptions(), grpc.WithContextDialer(dial))
	for i := range 20 {
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// 20 answers are at least 20 frames: fewer, and the counter did not
	// see the server's side of the connection.
	if n := frames.Load(); n < 20 {
		t.Fatalf("counted %d frames from the server over 20 requests", n)
	}
	if n := pings.Load(); n != 0 {
		t.Fatalf("the server sent %d pings over 20 sequential requests, want none", n)
	}
}

// pingCounter counts the HTTP/2 frames, and the PING frames that are not
// acks, in what it reads: a client's connection, so the server's frames
// (a server's side starts with a frame, SETTINGS, not a preface).
type pingCounter struct {
	net.Conn
	frames, pings *atomic.Int64
	buf           []byte // an incomplete frame
}

func (c *pingCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.buf = append(c.buf, p[:n]...)
	for len(c.buf) >= 9 {
		size := 9 + (int(c.buf[0])<<16 | int(c.buf[1])<<8 | int(c.buf[2]))
		if len(c.buf) < size {
			break
		}
		c.frames.Add(1)
		const ping, ack = 0x6, 0x1
		if c.buf[3] == ping && c.buf[4]&ack == 0 {
			c.pings.Add(1)
		}
		c.buf = c.buf[size:]
	}
	return n, err
}

// healthClient serves gRPC's health service on a loopback port with opts,
// and dials it with dopts, both until the test ends.
func healthClient(t *testing.T, opts []grpc.ServerOption, dopts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}
