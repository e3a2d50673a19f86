package mvcc

import (
	"bytes"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Txn evaluation, as etcd's apply does it: static checks (CheckTxn, in
// txn_check.go), then the branch of every transaction and nested
// transaction decided against the state before any of its operations
// (plan), then the checks etcd makes before applying (check), and only then
// the writes (exec). Every refusal comes before the first write, so a
// refused request writes nothing; an error after it is a database failure,
// which aborts the batch.

// plan is the branch a transaction takes, decided for it and every nested
// transaction against the state before any of its operations run, as etcd
// does.
type plan struct {
	succeeded bool
	ops       []*pb.RequestOp
	nested    map[int]*plan
}

func (b *batch) plan(r *pb.TxnRequest) (*plan, error) {
	ok := true
	for _, c := range r.Compare {
		hold, err := b.compare(c)
		if err != nil {
			return nil, err
		}
		if !hold {
			ok = false
			break
		}
	}
	p := &plan{succeeded: ok, ops: r.Success}
	if !ok {
		p.ops = r.Failure
	}
	for i, op := range p.ops {
		if t, isTxn := op.Request.(*pb.RequestOp_RequestTxn); isTxn && t.RequestTxn != nil {
			np, err := b.plan(t.RequestTxn)
			if err != nil {
				return nil, err
			}
			if p.nested == nil {
				p.nested = map[int]*plan{}
			}
			p.nested[i] = np
		}
	}
	return p, nil
}

// compare evaluates one compare against every key in its range; a missing
// key compares as zero, except on VALUE, where it always fails.
func (b *batch) compare(c *pb.Compare) (bool, error) {
	var kvs []*mvccpb.KeyValue
	kr := NewKeyRange(c.Key, c.RangeEnd)
	if kr.Single() {
		kv, err := b.tx.get(c.Key)
		if err != nil {
			return false, err
		}
		if kv != nil {
			kvs = []*mvccpb.KeyValue{kv}
		}
	} else if !kr.Empty() {
		var err error
		if kvs, err = b.tx.scan(kr, 0); err != nil {
			return false, err
		}
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return compareKV(c, &mvccpb.KeyValue{}), nil
	}
	for _, kv := range kvs {
		if !compareKV(c, kv) {
			return false, nil
		}
	}
	return true, nil
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var r int
	switch c.Target {
	case pb.Compare_VALUE:
		r = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		r = cmp64(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmp64(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		r = cmp64(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		r = cmp64(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	case pb.Compare_GREATER:
		return r > 0
	case pb.Compare_LESS:
		return r < 0
	}
	// A result etcd does not know holds, as in etcd's compareKV.
	return true
}

// check refuses, before anything is written, what etcd refuses at apply
// time: ranges at unreadable revisions (below floor, the request's), puts
// on unknown leases, and ignore_value/ignore_lease on keys that do not
// exist.
func (b *batch) check(p *plan, floor int64) error {
	for i, op := range p.ops {
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			rr := v.RequestRange
			if rr.Revision > b.rev {
				return ErrFutureRev
			}
			if rr.Revision > 0 && rr.Revision < floor {
				return ErrCompacted
			}
		case *pb.RequestOp_RequestPut:
			pr := v.RequestPut
			if pr.IgnoreValue || pr.IgnoreLease {
				kv, err := b.tx.get(pr.Key)
				if err != nil {
					return err
				}
				if kv == nil {
					return ErrKeyNotFound
				}
			}
			if pr.Lease != 0 && !pr.IgnoreLease {
				ok, err := b.leaseExists(pr.Lease)
				if err != nil {
					return err
				}
				if !ok {
					return ErrLeaseNotFound
				}
			}
		case *pb.RequestOp_RequestTxn:
			if np := p.nested[i]; np != nil {
				if err := b.check(np, floor); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// floor is the etcd API's floor as this batch sees it.
func (b *batch) floor() int64 { return max(b.compact, b.s.RetainFloor()) }

// change is one request's pending revision: rev is taken when the request
// makes its first change, and every change in it shares that revision.
// floor is read once per request: the pruner may raise the store's floor
// while the request runs, and a Range op that check let through must not
// be refused after the request has written.
type change struct {
	rev   int64
	sub   int64
	floor int64
}

func (c *change) touched() bool { return c.sub > 0 }

// headerRev is the revision a response inside the request reports: the new
// one once the request has changed something, the old one before.
func (c *change) headerRev(old int64) int64 {
	if c.touched() {
		return c.rev
	}
	return old
}

func (b *batch) txn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := CheckTxn(r, MaxTxnOps); err != nil {
		return nil, err
	}
	p, err := b.plan(r)
	if err != nil {
		return nil, err
	}
	c := &change{rev: b.rev + 1, floor: b.floor()}
	if err := b.check(p, c.floor); err != nil {
		return nil, err
	}
	resp, err := b.exec(c, p)
	if err != nil {
		if c.touched() && Refused(err) {
			// A refusal is a request that wrote nothing; this one has
			// written, so it fails the batch, whose rollback takes the
			// writes back.
			return nil, fmt.Errorf("txn: refused after writing: %v", err)
		}
		return nil, err
	}
	if c.touched() {
		b.rev = c.rev
	}
	resp.Header = &pb.ResponseHeader{Revision: b.rev}
	return resp, nil
}

func (b *batch) exec(c *change, p *plan) (*pb.TxnResponse, error) {
	resp := &pb.TxnResponse{Succeeded: p.succeeded, Responses: make([]*pb.ResponseOp, len(p.ops))}
	for i, op := range p.ops {
		var out pb.ResponseOp
		var err error
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			r := &pb.ResponseOp_ResponseRange{}
			r.ResponseRange, err = b.rangeOp(c, v.RequestRange)
			out.Response = r
		case *pb.RequestOp_RequestPut:
			r := &pb.ResponseOp_ResponsePut{}
			r.ResponsePut, err = b.put(c, v.RequestPut)
			out.Response = r
		case *pb.RequestOp_RequestDeleteRange:
			r := &pb.ResponseOp_ResponseDeleteRange{}
			r.ResponseDeleteRange, err = b.deleteRange(c, v.RequestDeleteRange)
			out.Response = r
		case *pb.RequestOp_RequestTxn:
			r := &pb.ResponseOp_ResponseTxn{ResponseTxn: &pb.TxnResponse{Succeeded: true}}
			if np := p.nested[i]; np != nil {
				r.ResponseTxn, err = b.exec(c, np)
			}
			if err == nil {
				// etcd gives a nested transaction's answer a header of
				// its own but leaves it empty (newTxnResp).
				r.ResponseTxn.Header = &pb.ResponseHeader{}
			}
			out.Response = r
		}
		if err != nil {
			return nil, err
		}
		resp.Responses[i] = &out
	}
	return resp, nil
}

// rangeOp reads inside the transaction, at the revision the request has
// reached: its own earlier writes included.
func (b *batch) rangeOp(c *change, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := b.tx.flush(); err != nil {
		return nil, err
	}
	res, err := b.s.rangeIn(b.ctx, b.tx.q(), r, c.headerRev(b.rev), c.floor)
	if err != nil {
		return nil, err
	}
	return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: res.Rev}, Kvs: res.Kvs, More: res.More, Count: res.Count}, nil
}

func (b *batch) put(c *change, p *pb.PutRequest) (*pb.PutResponse, error) {
	prev, err := b.tx.get(p.Key)
	if err != nil {
		return nil, err
	}
	kv := &mvccpb.KeyValue{Key: p.Key, Value: p.Value, Lease: p.Lease, ModRevision: c.rev, CreateRevision: c.rev, Version: 1}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
		if p.IgnoreValue {
			kv.Value = prev.Value
		}
		if p.IgnoreLease {
			kv.Lease = prev.Lease
		}
	}
	if kv.Value == nil {
		kv.Value = []byte{}
	}
	if err := b.tx.put(kv, c.sub, b.unixMs); err != nil {
		return nil, err
	}
	c.sub++
	b.events = append(b.events, &Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev, UnixMs: b.unixMs})
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: c.rev}}
	if p.PrevKv {
		resp.PrevKv = prev
	}
	return resp, nil
}

func (b *batch) deleteRange(c *change, d *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	prevs, err := b.deleteIn(c, NewKeyRange(d.Key, d.RangeEnd))
	if err != nil {
		return nil, err
	}
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{Revision: c.headerRev(b.rev)}, Deleted: int64(len(prevs))}
	if d.PrevKv {
		resp.PrevKvs = prevs
	}
	return resp, nil
}

// deleteIn deletes every live key in kr in revision c and returns their
// rows as they were, in key order.
func (b *batch) deleteIn(c *change, kr KeyRange) ([]*mvccpb.KeyValue, error) {
	var prevs []*mvccpb.KeyValue
	switch {
	case kr.Empty():
		return nil, nil
	case kr.Single():
		// kube-apiserver's delete: the batch's row reader answers it without
		// a scan (and without sending a replica batch's held-back writes).
		prev, err := b.tx.get(kr.Key)
		if err != nil || prev == nil {
			return nil, err
		}
		prevs = []*mvccpb.KeyValue{prev}
	default:
		if rd, ok := b.tx.(rangeDeleter); ok {
			prevs, done, err := rd.deleteRange(kr, c.rev, c.sub, b.unixMs)
			if err == nil && done {
				b.deleted(c, prevs)
			}
			if err != nil || done {
				return prevs, err
			}
		}
		var err error
		if prevs, err = b.tx.scan(kr, 0); err != nil {
			return nil, err
		}
	}
	return prevs, b.deleteKeys(c, prevs)
}

// deleteKeys removes the given current rows in revision c.
func (b *batch) deleteKeys(c *change, prevs []*mvccpb.KeyValue) error {
	for i, prev := range prevs {
		if err := b.tx.del(prev.Key, c.rev, c.sub+int64(i), b.unixMs); err != nil {
			return err
		}
	}
	b.deleted(c, prevs)
	return nil
}

// deleted records the deletes of prevs, already written as changes c.sub,
// c.sub+1, ... of revision c, as the batch's events. A range delete can
// make hundreds of thousands: they are allocated together.
func (b *batch) deleted(c *change, prevs []*mvccpb.KeyValue) {
	evs := make([]Event, len(prevs))
	kvs := make([]mvccpb.KeyValue, len(prevs))
	for i, prev := range prevs {
		kvs[i].Key, kvs[i].ModRevision = prev.Key, c.rev
		evs[i] = Event{Type: mvccpb.DELETE, Kv: &kvs[i], PrevKv: prev, UnixMs: b.unixMs}
		b.events = append(b.events, &evs[i])
	}
	c.sub += int64(len(prevs))
}
