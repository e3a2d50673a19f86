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
		Version:          m.s.cfg.Version,
		StorageVersion:   m.s.cfg.Version,
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
	return unimplemented("Snapshot", "back up the database itself (quantykube backup, pg_dump)")
}

func (m *maintenanceServer) MoveLeader(context.Context, *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return nil, unimplemented("MoveLeader", "QuantyKube has no raft leader")
}

func (m *maintenanceServer) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, unimplemented("Downgrade", "there is no etcd cluster version to downgrade")
}
