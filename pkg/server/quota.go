package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// etcd's estimates of what a request adds to the store (its
// server/storage/quota.go): a lease's record, and a key's metadata beside
// its key and value. The quota compares them with the space left, so the
// same requests reach it at about the same size as on etcd (ADR-049).
const (
	leaseCost = 64
	kvCost    = 256
)

func putCost(r *pb.PutRequest) int64 { return kvCost + int64(len(r.Key)+len(r.Value)) }

// txnCost is the larger of the two branches' puts, nested Txns included,
// whichever the compares pick: a Txn without puts costs nothing.
func txnCost(r *pb.TxnRequest) int64 {
	return max(opsCost(r.Success), opsCost(r.Failure))
}

func opsCost(ops []*pb.RequestOp) int64 {
	var n int64
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			n += putCost(p)
		} else if t := op.GetRequestTxn(); t != nil {
			n += txnCost(t)
		}
	}
	return n
}

// checkQuota refuses a request of that cost with etcd's NOSPACE error
// past the quota or while the NOSPACE alarm is active, as etcd's quota
// and capped appliers do, before any other check of the request.
func (s *Server) checkQuota(ctx context.Context, cost int64) error {
	if err := s.store.CheckQuota(ctx, cost); err != nil {
		return toGRPC(err)
	}
	return nil
}
