// Package server serves etcd's v3 gRPC API (KV, Watch, Lease, Maintenance,
// Cluster, Auth) from an mvcc.Backend: request checks, etcd's exact errors
// and response headers, and the per-stream watch engine. It holds no state
// of its own beyond open watch streams; pkg/endpoint wires it to a store
// and a listener.
package server

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Version is the etcd server version Status reports by default.
// kube-apiserver enables consistent reads from its cache only from 3.5.13
// on; QuantyKube behaves as etcd 3.6 does.
const Version = "3.6.0"

// DefaultMaxRequestBytes is etcd's --max-request-bytes default, 1.5 MiB.
const DefaultMaxRequestBytes = 3 * 1024 * 1024 / 2

// Config configures the services.
type Config struct {
	Backend         mvcc.Backend
	Logger          *slog.Logger
	MaxRequestBytes int
	// ClientURLs are advertised by MemberList.
	ClientURLs []string
	// ProgressNotifyInterval is how often a watcher created with
	// progress_notify hears the current revision (etcd: 10 minutes).
	ProgressNotifyInterval time.Duration
	// Version is the etcd version Status reports (default Version).
	Version string
	// Done, when closed, ends every watch stream so a graceful stop can
	// finish.
	Done <-chan struct{}
}

// Server implements the etcd services.
type Server struct {
	cfg   Config
	store mvcc.Backend
	log   *slog.Logger
	// turns is shared by the watch streams (watch_turns.go).
	turns *turns
}

// New fills cfg's defaults; it checks nothing, and the listeners are the
// caller's (pkg/endpoint).
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.ProgressNotifyInterval <= 0 {
		cfg.ProgressNotifyInterval = 10 * time.Minute
	}
	if cfg.Version == "" {
		cfg.Version = Version
	}
	return &Server{cfg: cfg, store: cfg.Backend, log: cfg.Logger, turns: newTurns(turnWait)}
}

// Register adds every etcd service to g.
func (s *Server) Register(g *grpc.Server) {
	pb.RegisterKVServer(g, &kvServer{s: s})
	pb.RegisterWatchServer(g, &watchServer{s: s})
	pb.RegisterLeaseServer(g, &leaseServer{s: s})
	pb.RegisterMaintenanceServer(g, &maintenanceServer{s: s})
	pb.RegisterClusterServer(g, &clusterServer{s: s})
	pb.RegisterAuthServer(g, &authServer{})
}

// GRPCOptions are the server options the etcd API needs: message size
// limits as etcd sets them, the interceptor that refuses an oversized
// request with etcd's error, the codec (proto, with big Range answers sent
// from the store's memory), the stream workers and fixed receive windows.
// The keepalive policy belongs to whoever owns the gRPC server
// (pkg/endpoint sets one that accepts kube-apiserver's client pings).
func (s *Server) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		// etcd adds the same 512 KiB of headroom for gRPC framing; the
		// interceptor enforces etcd's exact limit with etcd's error.
		grpc.MaxRecvMsgSize(s.cfg.MaxRequestBytes + 512*1024),
		grpc.MaxSendMsgSize(1<<31 - 1),
		grpc.MaxConcurrentStreams(1<<32 - 1),
		grpc.ChainUnaryInterceptor(s.sizeInterceptor),
		// Big Range answers sent without a copy of their values (codec.go).
		grpc.ForceServerCodecV2(newCodec()),
		// A request on a goroutine of its own grows that goroutine's stack
		// (a copy each time it doubles) for every request; a worker's stack
		// stays grown. A long stream (a watch) keeps its worker, and a
		// request that finds every worker busy gets a goroutine of its own
		// as before.
		grpc.NumStreamWorkers(uint32(streamWorkers())),
		// Fixed receive windows, which turn off gRPC's bandwidth-delay
		// estimate on the server. That estimate pings the client on the
		// first request after its last ping was answered, so a client with
		// one request at a time (kube-apiserver between bursts, etcdctl)
		// had every request answered with a ping too, and its ack cost both
		// processes a wakeup and a read or a write: 3-13% of the server's
		// CPU per write at one client (docs/benchmarks/sqlite-writes.md).
		// The windows bound only what clients send ahead:
		// requests, of at most gRPC's limit above. 16 MiB is the most the
		// estimate would grow either window to; a message larger than the
		// stream's window is granted its whole size once its handler
		// starts reading it (ADR-017).
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(16 << 20),
		// Each connection reads through a buffer of its own, and
		// kube-apiserver 1.37 opens one connection per resource (84 at
		// start): gRPC's 32 KiB default held 2.7 MB of them, 3-4 MB of
		// RSS with the collector's headroom, for connections that are
		// mostly idle. 8 KiB still reads a burst of small requests in one
		// call; a frame larger than the buffer is read past it, into the
		// message (docs/benchmarks/memory-per-control-plane.md).
		grpc.ReadBufferSize(8 << 10),
	}
}

// streamWorkers is how many goroutines serve streams for the whole server:
// enough for the requests that run at once on GOMAXPROCS threads, and for
// the watch streams that hold theirs for their lifetime.
func streamWorkers() int { return 64 + 8*runtime.GOMAXPROCS(0) }

// sizeInterceptor bounds the requests of QuantyKube's own services
// (History) by their size. The etcd services bound theirs as etcd does,
// after their other checks (checkSize).
func (s *Server) sizeInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok && m.ProtoReflect().Descriptor().ParentFile().Package() != "etcdserverpb" && proto.Size(m) > s.cfg.MaxRequestBytes {
		return nil, rpctypes.ErrGRPCRequestTooLarge
	}
	return handler(ctx, req)
}

// checkSize refuses a write over --max-request-bytes as etcd does: etcd
// bounds the raft log entry it makes of the request, the request wrapped
// with a header, not the request itself. What etcd answers without its log
// (reads, read-only transactions) it does not bound beyond gRPC's limit.
func (s *Server) checkSize(m proto.Message) error {
	// The entry holds m as a field numbered below 16 and a header (field
	// 100) holding the request ID.
	n := proto.Size(m)
	header := protowire.SizeTag(1) + protowire.SizeVarint(etcdRequestID)
	if protowire.SizeTag(100)+protowire.SizeBytes(header)+protowire.SizeTag(4)+protowire.SizeBytes(n) > s.cfg.MaxRequestBytes {
		return rpctypes.ErrGRPCRequestTooLarge
	}
	return nil
}

// etcdRequestID is the largest request ID of etcd's default member (ID
// 8e9e05c52164694d: `etcd` with no flags), whose size the entry's header
// takes. etcd makes an ID of the low 16 bits of its member ID above 48
// bits of time (idutil.Generator), so the ID's size, and the largest write
// a member accepts, depends on the member: for half of all member IDs the
// ID is a byte longer than for the default one. QuantyKube's own member ID
// is random; bounding as the default member does, every store accepts the
// same writes, and exactly the default etcd's (with a 48-byte key, a Put
// of a value of up to 1,572,793 bytes at the default limit).
const etcdRequestID = uint64(0x694d)<<48 | (1<<48 - 1)

// readOnly reports whether a transaction only reads, as etcd's
// IsTxnReadonly does: every operation of both branches a Range.
func readOnly(r *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

func (s *Server) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{
		ClusterId: s.store.ClusterID(),
		MemberId:  s.store.MemberID(),
		Revision:  rev,
		RaftTerm:  1,
	}
}
