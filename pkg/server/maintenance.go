package server

import (
	"context"
	"fmt"

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
		DbSizeQuota:      m.s.store.QuotaBytes(),
		Errors:           alarmErrors(m.s.store.Alarms(ctx, pb.AlarmType_NONE)),
	}, nil
}

// alarmErrors are the active alarms as etcd v3.6's Status lists them:
// its gogo protobuf's compact text, written out here because the
// protobuf module's String() varies its spacing on purpose.
func alarmErrors(alarms []*pb.AlarmMember) []string {
	var out []string
	for _, a := range alarms {
		out = append(out, fmt.Sprintf("memberID:%d alarm:%s ", a.MemberID, a.Alarm))
	}
	return out
}

// Alarm lists, raises and clears alarms as etcd's does (etcdctl alarm
// list, alarm disarm), kept in the database so that every replica and
// restart sees them (ADR-049). QuantyKube raises NOSPACE past its quota;
// CORRUPT, which etcd's corruption check raises and which stops every
// request, it has no check for, and refuses to raise.
func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp := &pb.AlarmResponse{}
	var a *pb.AlarmMember
	var err error
	switch r.Action {
	case pb.AlarmRequest_GET:
		resp.Alarms = m.s.store.Alarms(ctx, r.Alarm)
	case pb.AlarmRequest_ACTIVATE:
		switch r.Alarm {
		case pb.AlarmType_NONE:
		case pb.AlarmType_NOSPACE:
			a, err = m.s.store.ActivateAlarm(ctx, r.MemberID, r.Alarm)
		default:
			return nil, unimplemented("Alarm ACTIVATE "+r.Alarm.String(), "QuantyKube raises only NOSPACE; the database checks its own pages")
		}
	case pb.AlarmRequest_DEACTIVATE:
		a, err = m.s.store.DeactivateAlarm(ctx, r.MemberID, r.Alarm)
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	if a != nil {
		resp.Alarms = []*pb.AlarmMember{a}
	}
	resp.Header = m.s.header(m.s.store.Rev())
	return resp, nil
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
