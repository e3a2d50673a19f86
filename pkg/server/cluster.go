package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

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
