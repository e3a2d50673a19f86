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
	if err := l.s.checkQuota(ctx, leaseCost); err != nil {
		return nil, err
	}
	lease, err := l.s.store.Grant(ctx, mvcc.LeaseGrant{ID: r.ID, TTL: r.TTL})
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.LeaseGrantResponse{Header: l.s.header(lease.Rev), ID: lease.ID, TTL: lease.TTL}, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	rev, err := l.s.store.Revoke(ctx, r.ID)
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
		ttl, err := l.s.store.Renew(stream.Context(), req.ID)
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
	info, err := l.s.store.TimeToLive(ctx, r.ID, r.Keys)
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
