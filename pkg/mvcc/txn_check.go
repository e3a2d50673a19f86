package mvcc

import pb "go.etcd.io/etcd/api/v3/etcdserverpb"

// The static checks etcd makes of a request before it reaches the store
// (its checkTxnRequest, checkIntervals and checkPutRequest): they need no
// state, so the gRPC layer and the batch both call them.

// MaxTxnOps is etcd's default --max-txn-ops.
const MaxTxnOps = 128

// CheckTxn applies etcd's static rules to a transaction, in etcd's order
// (checkTxnRequest, then checkIntervals): operation counts, empty keys and
// empty operations, then no key written twice in one branch.
func CheckTxn(r *pb.TxnRequest, maxOps int) error {
	if err := checkTxnOps(r, maxOps); err != nil {
		return err
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		if _, _, err := intervals(ops); err != nil {
			return err
		}
	}
	return nil
}

// checkTxnOps checks r's lists and operations. As in etcd, a nested
// transaction may have only as many operations per list as its parent's
// longest list leaves of maxOps.
func checkTxnOps(r *pb.TxnRequest, maxOps int) error {
	n := max(len(r.Compare), len(r.Success), len(r.Failure))
	if n > maxOps {
		return ErrTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return ErrEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkOp(op, maxOps-n); err != nil {
				return err
			}
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
		return checkTxnOps(v.RequestTxn, maxOps)
	default:
		// An operation with no request: etcd refuses it with this error.
		return ErrKeyNotFound
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

// walkTxn calls visit with every single key that t and its nested
// transactions compare or put.
func walkTxn(t *pb.TxnRequest, visit func(key []byte)) {
	for _, c := range t.Compare {
		if len(c.RangeEnd) == 0 {
			visit(c.Key)
		}
	}
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestPut:
				if v.RequestPut != nil {
					visit(v.RequestPut.Key)
				}
			case *pb.RequestOp_RequestTxn:
				if v.RequestTxn != nil {
					walkTxn(v.RequestTxn, visit)
				}
			}
		}
	}
}
