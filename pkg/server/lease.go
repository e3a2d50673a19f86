package server

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *Server
}

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	id, ttl, rev, err := l.s.store.LeaseGrant(ctx, r.ID, r.TTL)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseGrantResponse{Header: l.s.header(rev), ID: id, TTL: ttl}, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	rev, err := l.s.store.LeaseRevoke(ctx, r.ID)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseRevokeResponse{Header: l.s.header(rev)}, nil
}

func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		ttl, err := l.s.store.LeaseRenew(req.ID)
		if err != nil && !errors.Is(err, mvcc.ErrLeaseNotFound) {
			return toGRPC(err)
		}
		// An unknown or expired lease answers TTL 0, as etcd does; clients
		// take that as the lease being gone.
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: l.s.header(l.s.store.Rev()), ID: req.ID, TTL: ttl}); err != nil {
			return err
		}
	}
}

func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	info, err := l.s.store.LeaseTimeToLive(ctx, r.ID, r.Keys)
	if errors.Is(err, mvcc.ErrLeaseNotFound) {
		return &pb.LeaseTimeToLiveResponse{Header: l.s.header(l.s.store.Rev()), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseTimeToLiveResponse{Header: l.s.header(l.s.store.Rev()), ID: info.ID, TTL: info.TTL, GrantedTTL: info.GrantedTTL, Keys: info.Keys}, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	ids := l.s.store.Leases()
	out := make([]*pb.LeaseStatus, len(ids))
	for i, id := range ids {
		out[i] = &pb.LeaseStatus{ID: id}
	}
	return &pb.LeaseLeasesResponse{Header: l.s.header(l.s.store.Rev()), Leases: out}, nil
}
