package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

type kvServer struct {
	pb.UnimplementedKVServer
	s *Server
}

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	res, err := k.s.store.Range(ctx, r)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.RangeResponse{Header: k.s.header(res.Rev), Kvs: res.Kvs, More: res.More, Count: res.Count}, nil
}

// rangeStreamChunk bounds one RangeStream message.
const rangeStreamChunk = 1 << 20

// RangeStream answers a Range in chunks: kvs spread over the messages,
// header, more and count on the last, so that merging them gives Range's
// answer.
func (k *kvServer) RangeStream(r *pb.RangeRequest, stream grpc.ServerStreamingServer[pb.RangeStreamResponse]) error {
	res, err := k.s.store.Range(stream.Context(), r)
	if err != nil {
		return toGRPC(err)
	}
	kvs := res.Kvs
	for len(kvs) > 0 {
		n, size := 0, 0
		for n < len(kvs) && (n == 0 || size+proto.Size(kvs[n]) <= rangeStreamChunk) {
			size += proto.Size(kvs[n])
			n++
		}
		if n == len(kvs) {
			break // the last chunk carries the totals
		}
		if err := stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Kvs: kvs[:n]}}); err != nil {
			return err
		}
		kvs = kvs[n:]
	}
	return stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{
		Header: k.s.header(res.Rev), Kvs: kvs, More: res.More, Count: res.Count,
	}})
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := mvcc.CheckPut(r); err != nil {
		return nil, toGRPC(err)
	}
	if err := k.s.checkSize(r); err != nil {
		return nil, err
	}
	resp, err := k.s.store.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: r}}}})
	if err != nil {
		return nil, toGRPC(err)
	}
	out := resp.Responses[0].GetResponsePut()
	out.Header = k.s.header(resp.Header.Revision)
	return out, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, toGRPC(mvcc.ErrEmptyKey)
	}
	if err := k.s.checkSize(r); err != nil {
		return nil, err
	}
	resp, err := k.s.store.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}}})
	if err != nil {
		return nil, toGRPC(err)
	}
	out := resp.Responses[0].GetResponseDeleteRange()
	out.Header = k.s.header(resp.Header.Revision)
	return out, nil
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	// Refuse malformed transactions before they reach the writer's queue.
	if err := mvcc.CheckTxn(r, mvcc.MaxTxnOps); err != nil {
		return nil, toGRPC(err)
	}
	if !readOnly(r) {
		if err := k.s.checkSize(r); err != nil {
			return nil, err
		}
	}
	resp, err := k.s.store.Txn(ctx, r)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp.Header = k.s.header(resp.Header.Revision)
	return resp, nil
}

func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	rev, err := k.s.store.Compact(ctx, r.Revision)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &pb.CompactionResponse{Header: k.s.header(rev)}, nil
}
