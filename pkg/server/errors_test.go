package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func TestToGRPC(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error // the gRPC error etcd's server gives
	}{
		{mvcc.ErrCompacted, rpctypes.ErrGRPCCompacted},
		{mvcc.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
		{mvcc.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
		{mvcc.ErrValueProvided, rpctypes.ErrGRPCValueProvided},
		{mvcc.ErrLeaseProvided, rpctypes.ErrGRPCLeaseProvided},
		{mvcc.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
		{mvcc.ErrLeaseExists, rpctypes.ErrGRPCLeaseExist},
		{mvcc.ErrLeaseTTLTooBig, rpctypes.ErrGRPCLeaseTTLTooLarge},
		{mvcc.ErrDuplicateKey, rpctypes.ErrGRPCDuplicateKey},
		{mvcc.ErrTooManyOps, rpctypes.ErrGRPCTooManyOps},
		{mvcc.ErrEmptyKey, rpctypes.ErrGRPCEmptyKey},
		{mvcc.ErrInvalidSort, rpctypes.ErrGRPCInvalidSortOption},
		{mvcc.ErrClosed, rpctypes.ErrGRPCStopped},
		{context.Canceled, rpctypes.ErrGRPCCanceled},
		{context.DeadlineExceeded, rpctypes.ErrGRPCTimeout},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("txn: %w", tc.err)} {
			got := toGRPC(err)
			gs, ws := status.Convert(got), status.Convert(tc.want)
			if gs.Code() != ws.Code() || gs.Message() != ws.Message() {
				t.Errorf("toGRPC(%v) = %v, want %v", err, got, tc.want)
			}
			// Clients match these by their text, as rpctypes.Error does.
			if rpctypes.Error(got) != rpctypes.Error(tc.want) {
				t.Errorf("toGRPC(%v) reads as %v on the client, want %v", err, rpctypes.Error(got), rpctypes.Error(tc.want))
			}
		}
		// A refusal's text is etcd's own, less the server's prefix.
		if mvcc.Refused(tc.err) && "etcdserver: "+tc.err.Error() != status.Convert(tc.want).Message() {
			t.Errorf("refusal %q does not read as %q", tc.err, status.Convert(tc.want).Message())
		}
	}

	if toGRPC(nil) != nil {
		t.Error("toGRPC(nil) is not nil")
	}
	// A gRPC status passes as it is.
	st := status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	if got := toGRPC(st); got != st {
		t.Errorf("toGRPC(%v) = %v", st, got)
	}
	// Anything else is the database failing: Unavailable, so clients retry.
	got := status.Convert(toGRPC(errors.New("disk I/O error")))
	if got.Code() != codes.Unavailable || !strings.Contains(got.Message(), "disk I/O error") {
		t.Errorf("a database error became %v", got)
	}
}
