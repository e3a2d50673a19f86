package history

import (
	"bytes"
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// restoreAttempts bounds retries when the key changes under a Restore.
const restoreAttempts = 5

// Restore writes the key back as it was, through the same write path as
// every etcd write. A key that already has that state is left alone. With
// if_mod_revision, only a key still at that mod_revision is restored (or
// found already as it was).
func (s *Service) Restore(ctx context.Context, r *historypb.Request) (*historypb.RestoreResponse, error) {
	return s.RestoreChecked(ctx, r, Bounds{}, nil)
}

// RestoreCheck decides whether a restore may go on, given the key's state
// now (cur, nil if absent) and the state it would write back (old, nil for
// a delete), and how it writes: nil writes old as it was. An error it
// returns ends the restore and is returned as it is.
type RestoreCheck func(ctx context.Context, cur, old *mvccpb.KeyValue) (*RestoreWrite, error)

// RestoreWrite shapes the write of one attempt of a restore.
type RestoreWrite struct {
	// Value, when set, is written instead of the old state's value: the
	// aggregated API writes an object back without what its caller may
	// not write (a status).
	Value []byte
	// Also are writes made in the same transaction, and If the conditions
	// they need beside the key's own: unless every one holds, nothing is
	// written and the restore looks again.
	Also []*pb.RequestOp
	If   []*pb.Compare
}

// RestoreChecked is Restore within b that asks check before every
// attempt, against exactly the state the attempt's conditional write may
// replace: if the key changes in between, the write fails and the next
// attempt asks again. The aggregated API checks the caller's access to
// the object this way.
func (s *Service) RestoreChecked(ctx context.Context, r *historypb.Request, b Bounds, check RestoreCheck) (*historypb.RestoreResponse, error) {
	if len(r.RangeEnd) != 0 {
		return nil, invalid("range_end is for Log and Get: Restore writes one key")
	}
	if err := logOnly(r); err != nil {
		return nil, err
	}
	if r.Revision == 0 && r.UnixMs == 0 {
		return nil, invalid("give the revision or unix_ms to restore from")
	}
	if r.GetIfModRevision() < 0 {
		return nil, invalid("if_mod_revision must not be negative")
	}
	rev, err := s.readRevision(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := b.checkRev(rev); err != nil {
		return nil, err
	}
	old, err := s.store.KeyAt(ctx, r.Key, rev)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &historypb.RestoreResponse{Revision: rev}
	if old != nil {
		// Leases are not restored: the key comes back without one.
		resp.Kv = &mvccpb.KeyValue{Key: old.Key, Value: old.Value}
	}
	for range restoreAttempts {
		cur, err := s.store.Range(ctx, &pb.RangeRequest{Key: r.Key})
		if err != nil {
			return nil, toStatus(err)
		}
		var now *mvccpb.KeyValue
		if len(cur.Kvs) == 1 {
			now = cur.Kvs[0]
		}
		w := &RestoreWrite{}
		if check != nil {
			// Before any answer: even "already as it was" shows the old value.
			shaped, err := check(ctx, now, old)
			if err != nil {
				return nil, err
			}
			if shaped != nil {
				w = shaped
			}
		}
		if err := unchanged(r, now); err != nil {
			return nil, err
		}
		var value []byte
		if old != nil {
			value = old.Value
			if w.Value != nil {
				value = w.Value
			}
		}
		var curMod int64
		if now != nil {
			curMod = now.ModRevision
			if old != nil && bytes.Equal(now.Value, value) {
				return resp, nil // already as it was
			}
		} else if old == nil {
			return resp, nil // already absent
		}
		op := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: r.Key}}}
		if old != nil {
			op = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: r.Key, Value: value}}}
		}
		success := append([]*pb.RequestOp{op}, w.Also...)
		if err := s.checkQuota(ctx, success); err != nil {
			return nil, err
		}
		// Only over the state just read: a concurrent writer wins, and the
		// restore looks again (with if_mod_revision, to refuse).
		txn, err := s.store.Txn(ctx, &pb.TxnRequest{
			Compare: append([]*pb.Compare{{Key: r.Key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: curMod}}}, w.If...),
			Success: success,
		})
		if err != nil {
			return nil, toStatus(err)
		}
		if txn.Succeeded {
			resp.NewRevision = txn.Header.Revision
			if resp.Kv != nil {
				// Report the state as written, with its new revision and version.
				got, err := s.store.KeyAt(ctx, r.Key, resp.NewRevision)
				if err != nil {
					return nil, toStatus(err)
				}
				resp.Kv = got
			}
			return resp, nil
		}
	}
	return nil, status.Errorf(codes.Aborted, "quantykube: %q kept changing during the restore; try again", r.Key)
}

// unchanged refuses a restore whose if_mod_revision the key's state now
// (cur, nil if absent) does not have: the caller decided on a state that
// is gone.
func unchanged(r *historypb.Request, cur *mvccpb.KeyValue) error {
	if r.IfModRevision == nil {
		return nil
	}
	want, mod := *r.IfModRevision, int64(0)
	if cur != nil {
		mod = cur.ModRevision
	}
	if mod == want {
		return nil
	}
	state := func(mod int64) string {
		if mod == 0 {
			return "absent"
		}
		return fmt.Sprintf("at mod_revision %d", mod)
	}
	return status.Errorf(codes.Aborted, "quantykube: %q changed since it was read: it is %s, not %s (if_mod_revision %d); nothing was restored",
		r.Key, state(mod), state(want), want)
}

// quotaStore is a store with a space quota (mvcc.Store, ADR-049).
type quotaStore interface {
	CheckQuota(ctx context.Context, cost int64) error
}

// checkQuota refuses a restore that puts a value while the store is out
// of space, as the etcd API refuses a put: with etcd's cost estimate of
// 256 bytes beside each put's key and value. A restore that deletes
// passes.
func (s *Service) checkQuota(ctx context.Context, ops []*pb.RequestOp) error {
	q, ok := s.store.(quotaStore)
	if !ok {
		return nil
	}
	var cost int64
	for _, op := range ops {
		if p := op.GetRequestPut(); p != nil {
			cost += 256 + int64(len(p.Key)+len(p.Value))
		}
	}
	return toStatus(q.CheckQuota(ctx, cost))
}
