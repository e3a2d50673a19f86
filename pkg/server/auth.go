package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

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
