package server

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// toGRPC maps the store's errors to etcd's exact gRPC errors, which clients
// (kube-apiserver among them) match by text.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, mvcc.ErrKeyNotFound):
		return rpctypes.ErrGRPCKeyNotFound
	case errors.Is(err, mvcc.ErrValueProvided):
		return rpctypes.ErrGRPCValueProvided
	case errors.Is(err, mvcc.ErrLeaseProvided):
		return rpctypes.ErrGRPCLeaseProvided
	case errors.Is(err, mvcc.ErrLeaseNotFound):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, mvcc.ErrLeaseExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, mvcc.ErrLeaseTTLTooBig):
		return rpctypes.ErrGRPCLeaseTTLTooLarge
	case errors.Is(err, mvcc.ErrDuplicateKey):
		return rpctypes.ErrGRPCDuplicateKey
	case errors.Is(err, mvcc.ErrTooManyOps):
		return rpctypes.ErrGRPCTooManyOps
	case errors.Is(err, mvcc.ErrEmptyKey):
		return rpctypes.ErrGRPCEmptyKey
	case errors.Is(err, mvcc.ErrInvalidSort):
		return rpctypes.ErrGRPCInvalidSortOption
	case errors.Is(err, mvcc.ErrNoSpace):
		return rpctypes.ErrGRPCNoSpace
	case errors.Is(err, mvcc.ErrClosed):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCTimeout
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("quantykube: database: %v", err))
}

func unimplemented(what, why string) error {
	return status.Errorf(codes.Unimplemented, "quantykube: %s is not supported: %s", what, why)
}
