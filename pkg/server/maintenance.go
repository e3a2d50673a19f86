package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/quantyroot/quantykube/pkg/mvcc"
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

// Hash is etcd's hash of its whole bbolt file, which no SQL database has;
// HashKV hashes the state, the same on every database (ADR-046).
func (m *maintenanceServer) Hash(context.Context, *pb.HashRequest) (*pb.HashResponse, error) {
	return nil, unimplemented("Hash", "it hashes etcd's bbolt file, which a SQL database has none of; HashKV (etcdctl endpoint hashkv) hashes the state at a revision")
}

// HashKV answers the state hash at the revision asked (0: the latest),
// folded to etcd's 32 bits: its first four bytes (ADR-046). As etcd's,
// a revision below the floor is "required revision has been compacted",
// one above the store's "a future revision"; compact_revision is the
// floor when the hash began. Replicas on one database answer alike at a
// revision, as etcd's members do.
func (m *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	res, err := m.s.store.Hash(ctx, mvcc.HashQuery{Rev: r.Revision})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.HashKVResponse{
		Header:          m.s.header(max(res.Rev, m.s.store.Rev())),
		Hash:            res.Uint32(),
		CompactRevision: res.Floor,
		HashRevision:    res.Rev,
	}, nil
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
