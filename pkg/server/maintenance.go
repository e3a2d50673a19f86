package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	total, inUse, err := m.s.store.DBSize(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	rev := m.s.store.Rev()
	return &pb.StatusResponse{
		Header:           m.s.header(rev),
		Version:          Version,
		StorageVersion:   Version,
		DbSize:           total,
		DbSizeInUse:      inUse,
		Leader:           m.s.store.MemberID(),
		RaftIndex:        uint64(rev),
		RaftAppliedIndex: uint64(rev),
		RaftTerm:         1,
	}, nil
}

// Alarm reports no alarms: QuantyKube raises none (database space is the
// database's own business).
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return &pb.AlarmResponse{Header: m.s.header(m.s.store.Rev())}, nil
}

func (m *maintenanceServer) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := m.s.store.Defragment(ctx); err != nil {
		return nil, toGRPC(err)
	}
	return &pb.DefragmentResponse{Header: m.s.header(m.s.store.Rev())}, nil
}

func (m *maintenanceServer) Hash(context.Context, *pb.HashRequest) (*pb.HashResponse, error) {
	return nil, unimplemented("Hash", "there are no replicas of a bbolt file to compare; the database guarantees its own integrity")
}

func (m *maintenanceServer) HashKV(context.Context, *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return nil, unimplemented("HashKV", "there are no raft replicas to compare")
}

func (m *maintenanceServer) Snapshot(*pb.SnapshotRequest, grpc.ServerStreamingServer[pb.SnapshotResponse]) error {
	return unimplemented("Snapshot", "back up the database itself (sqlite3 .backup, pg_dump)")
}

func (m *maintenanceServer) MoveLeader(context.Context, *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return nil, unimplemented("MoveLeader", "QuantyKube has no raft leader")
}

func (m *maintenanceServer) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, unimplemented("Downgrade", "there is no etcd cluster version to downgrade")
}

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	id := c.s.store.MemberID()
	return &pb.MemberListResponse{
		Header:  c.s.header(c.s.store.Rev()),
		Members: []*pb.Member{{ID: id, Name: "quantykube", ClientURLs: c.s.cfg.ClientURLs}},
	}, nil
}

func (c *clusterServer) MemberAdd(context.Context, *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, unimplemented("MemberAdd", "replicas share one database instead of joining a raft cluster")
}

func (c *clusterServer) MemberRemove(context.Context, *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return nil, unimplemented("MemberRemove", "replicas share one database instead of joining a raft cluster")
}

func (c *clusterServer) MemberUpdate(context.Context, *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return nil, unimplemented("MemberUpdate", "replicas share one database instead of joining a raft cluster")
}

func (c *clusterServer) MemberPromote(context.Context, *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return nil, unimplemented("MemberPromote", "there are no learners")
}

// authServer reports authentication as disabled and refuses to enable it:
// QuantyKube authenticates clients with TLS certificates.
type authServer struct {
	pb.UnimplementedAuthServer
}

const authWhy = "use TLS client certificates (--client-cert-auth, --trusted-ca-file)"

func (a *authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: &pb.ResponseHeader{}, Enabled: false}, nil
}

func (a *authServer) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return nil, unimplemented("etcd authentication", authWhy)
}

func (a *authServer) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, unimplemented("etcd authentication", authWhy)
}
