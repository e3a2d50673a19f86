package mvcc

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// MaxTxnOps is etcd's default --max-txn-ops.
const MaxTxnOps = 128

// CheckTxn applies etcd's static rules to a transaction: operation count,
// empty keys, and no key written twice in one branch.
func CheckTxn(r *pb.TxnRequest, maxOps int) error {
	if len(r.Compare) > maxOps || len(r.Success) > maxOps || len(r.Failure) > maxOps {
		return ErrTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return ErrEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkOp(op, maxOps); err != nil {
				return err
			}
		}
		if _, _, err := intervals(ops); err != nil {
			return err
		}
	}
	return nil
}

func checkOp(op *pb.RequestOp, maxOps int) error {
	switch v := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		if v.RequestRange == nil || len(v.RequestRange.Key) == 0 {
			return ErrEmptyKey
		}
		if !validSort(v.RequestRange) {
			return ErrInvalidSort
		}
	case *pb.RequestOp_RequestPut:
		return CheckPut(v.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		if v.RequestDeleteRange == nil || len(v.RequestDeleteRange.Key) == 0 {
			return ErrEmptyKey
		}
	case *pb.RequestOp_RequestTxn:
		if v.RequestTxn == nil {
			return nil
		}
		return CheckTxn(v.RequestTxn, maxOps)
	}
	return nil
}

// CheckPut applies etcd's static rules to a put.
func CheckPut(p *pb.PutRequest) error {
	switch {
	case p == nil || len(p.Key) == 0:
		return ErrEmptyKey
	case p.IgnoreValue && len(p.Value) != 0:
		return ErrValueProvided
	case p.IgnoreLease && p.Lease != 0:
		return ErrLeaseProvided
	}
	return nil
}

// intervals returns the keys put and the ranges deleted by ops (nested
// transactions included), failing when a key would be written twice: two
// puts of one key, or a put inside a deleted range. The two branches of a
// nested transaction exclude each other, so they may name the same key.
func intervals(ops []*pb.RequestOp) (map[string]bool, []KeyRange, error) {
	var dels []KeyRange
	for _, op := range ops {
		if d, ok := op.Request.(*pb.RequestOp_RequestDeleteRange); ok && d.RequestDeleteRange != nil {
			dels = append(dels, NewKeyRange(d.RequestDeleteRange.Key, d.RequestDeleteRange.RangeEnd))
		}
	}
	inDels := func(k string) bool {
		for _, d := range dels {
			if d.Contains([]byte(k)) {
				return true
			}
		}
		return false
	}
	puts := map[string]bool{}
	for _, op := range ops {
		t, ok := op.Request.(*pb.RequestOp_RequestTxn)
		if !ok || t.RequestTxn == nil {
			continue
		}
		putsThen, delsThen, err := intervals(t.RequestTxn.Success)
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := intervals(t.RequestTxn.Failure)
		if err != nil {
			return nil, nil, err
		}
		for k := range putsThen {
			if puts[k] || inDels(k) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = true
		}
		for k := range putsElse {
			if (puts[k] && !putsThen[k]) || inDels(k) {
				return nil, nil, ErrDuplicateKey
			}
			puts[k] = true
		}
		dels = append(append(dels, delsThen...), delsElse...)
	}
	for _, op := range ops {
		p, ok := op.Request.(*pb.RequestOp_RequestPut)
		if !ok || p.RequestPut == nil {
			continue
		}
		k := string(p.RequestPut.Key)
		if puts[k] || inDels(k) {
			return nil, nil, ErrDuplicateKey
		}
		puts[k] = true
	}
	return puts, dels, nil
}

// plan is the branch a transaction takes, decided for it and every nested
// transaction against the state before any of its operations run, as etcd
// does.
type plan struct {
	succeeded bool
	ops       []*pb.RequestOp
	nested    map[int]*plan
}

func (w *writer) plan(r *pb.TxnRequest) (*plan, error) {
	ok := true
	for _, c := range r.Compare {
		hold, err := w.compare(c)
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
			np, err := w.plan(t.RequestTxn)
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
func (w *writer) compare(c *pb.Compare) (bool, error) {
	var kvs []*row
	kr := NewKeyRange(c.Key, c.RangeEnd)
	if kr.Single() {
		kv, err := w.get(c.Key)
		if err != nil {
			return false, err
		}
		if kv != nil {
			kvs = []*row{kv}
		}
	} else if !kr.Empty() {
		cond, args := w.s.q.where("key", kr, nil)
		var err error
		kvs, err = w.scanRows(`SELECT key, value, create_rev, mod_rev, version, lease FROM current WHERE `+cond, args...)
		if err != nil {
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
	return false
}

// check refuses, before anything is written, what etcd refuses at apply
// time: ranges at unreadable revisions, puts on unknown leases, and
// ignore_value/ignore_lease on keys that do not exist.
func (w *writer) check(p *plan) error {
	for i, op := range p.ops {
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			rr := v.RequestRange
			if rr.Revision > w.rev {
				return ErrFutureRev
			}
			if rr.Revision > 0 && rr.Revision < max(w.compact, w.s.RetainFloor()) {
				return ErrCompacted
			}
		case *pb.RequestOp_RequestPut:
			pr := v.RequestPut
			if pr.IgnoreValue || pr.IgnoreLease {
				kv, err := w.get(pr.Key)
				if err != nil {
					return err
				}
				if kv == nil {
					return ErrKeyNotFound
				}
			}
			if pr.Lease != 0 && !pr.IgnoreLease {
				ok, err := w.leaseExists(pr.Lease)
				if err != nil {
					return err
				}
				if !ok {
					return ErrLeaseNotFound
				}
			}
		case *pb.RequestOp_RequestTxn:
			if np := p.nested[i]; np != nil {
				if err := w.check(np); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (w *writer) applyTxn(r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := CheckTxn(r, MaxTxnOps); err != nil {
		return nil, err
	}
	p, err := w.plan(r)
	if err != nil {
		return nil, err
	}
	if err := w.check(p); err != nil {
		return nil, err
	}
	c := &change{rev: w.rev + 1}
	resp, err := w.exec(c, p)
	if err != nil {
		return nil, err
	}
	if c.touched() {
		w.rev = c.rev
	}
	resp.Header = &pb.ResponseHeader{Revision: w.rev}
	return resp, nil
}

func (w *writer) exec(c *change, p *plan) (*pb.TxnResponse, error) {
	resp := &pb.TxnResponse{Succeeded: p.succeeded, Responses: make([]*pb.ResponseOp, 0, len(p.ops))}
	for i, op := range p.ops {
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			// The range reads the tables: the batch's held-back writes
			// (shared databases) must be there first.
			if err := w.flush(); err != nil {
				return nil, dbErr(err)
			}
			rev := c.headerRev(w.rev)
			res, err := w.s.rangeIn(w.ctx, w.tx, v.RequestRange, rev, max(w.compact, w.s.RetainFloor()))
			if err != nil {
				return nil, dbErr(err)
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{
				ResponseRange: &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: res.Rev}, Kvs: res.Kvs, More: res.More, Count: res.Count},
			}})
		case *pb.RequestOp_RequestPut:
			pr, err := w.put(c, v.RequestPut)
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}})
		case *pb.RequestOp_RequestDeleteRange:
			dr, err := w.deleteRange(c, v.RequestDeleteRange)
			if err != nil {
				return nil, err
			}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}})
		case *pb.RequestOp_RequestTxn:
			np := p.nested[i]
			var tr *pb.TxnResponse
			if np == nil {
				tr = &pb.TxnResponse{Succeeded: true}
			} else {
				var err error
				if tr, err = w.exec(c, np); err != nil {
					return nil, err
				}
			}
			tr.Header = &pb.ResponseHeader{Revision: c.headerRev(w.rev)}
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}})
		default:
			resp.Responses = append(resp.Responses, &pb.ResponseOp{})
		}
	}
	return resp, nil
}
