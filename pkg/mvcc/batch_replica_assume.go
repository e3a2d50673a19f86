package mvcc

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// What a replica batch (batch_replica.go) may assume instead of reading
// the database, so that it takes one round trip (ADR-007, "One round
// trip"): which batches assume and from what, the rows the writer
// remembers, and what happens when an assumption fails.

// calmBatches is how many batches in a row must find the database as this
// replica left it before batches assume again.
const calmBatches = 4

// writerMark is a random mark, never 0, for a replica's batches to write
// as meta's writer where the dialect keeps it (WriterMarker), and 0 where
// it does not: its BatchStart.Writer is always 0.
func writerMark(sh ReplicaDialect) int64 {
	if _, ok := sh.(WriterMarker); !ok {
		return 0
	}
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if m := int64(binary.BigEndian.Uint64(b[:]) >> 1); m != 0 {
			return m
		}
	}
}

// assumption is an Assumption with the rows it names.
type assumption struct {
	Assumption
	rows []*mvccpb.KeyValue
}

// assume returns what a batch of reqs, naming keys, may assume, or nil
// when it must read the database first.
func (b *replicaBatcher) assume(reqs []*writeReq, keys [][]byte) *assumption {
	if b.readNext {
		b.readNext = false
		return nil
	}
	if !b.known || b.calm < calmBatches {
		return nil
	}
	created := map[string]bool{}
	for _, r := range reqs {
		// Leases are not in what is assumed: another replica may revoke
		// one, and a lease's own requests read its row.
		if r.kind != wTxn || r.txn == nil || usesLease(r.txn) {
			return nil
		}
		walkCreates(r.txn, func(k []byte) { created[string(k)] = true })
	}
	a := &assumption{Assumption: Assumption{Start: b.last, Keys: keys, ModRevs: make([]int64, len(keys))}, rows: make([]*mvccpb.KeyValue, len(keys))}
	for i, k := range keys {
		kv, ok := b.remembered.get(string(k))
		if !ok && !created[string(k)] {
			return nil
		}
		a.rows[i] = kv
		if kv != nil {
			a.ModRevs[i] = kv.ModRevision
		}
	}
	return a
}

// usesLease reports whether t (or a Txn in it) puts with a lease.
func usesLease(t *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestPut:
				if v.RequestPut != nil && v.RequestPut.Lease != 0 {
					return true
				}
			case *pb.RequestOp_RequestTxn:
				if v.RequestTxn != nil && usesLease(v.RequestTxn) {
					return true
				}
			}
		}
	}
	return false
}

// walkCreates visits the keys t (or a Txn in it) compares as absent: a
// mod_revision, create_revision or version equal to 0, as a create does.
func walkCreates(t *pb.TxnRequest, visit func(key []byte)) {
	for _, c := range t.Compare {
		if len(c.RangeEnd) > 0 || c.Result != pb.Compare_EQUAL {
			continue
		}
		switch c.Target {
		case pb.Compare_MOD:
			if c.GetModRevision() == 0 {
				visit(c.Key)
			}
		case pb.Compare_CREATE:
			if c.GetCreateRevision() == 0 {
				visit(c.Key)
			}
		case pb.Compare_VERSION:
			if c.GetVersion() == 0 {
				visit(c.Key)
			}
		}
	}
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if v, ok := op.Request.(*pb.RequestOp_RequestTxn); ok && v.RequestTxn != nil {
				walkCreates(v.RequestTxn, visit)
			}
		}
	}
}

// replicaRows remembers current rows (nil: absent) as this replica's last
// batch left them, within a budget: two generations, the older dropped
// whole when the newer fills half the budget, so what batches keep
// touching stays.
type replicaRows struct {
	cur, old map[string]*mvccpb.KeyValue
	bytes    int
}

// replicaRowsBytes bounds what replicaRows holds (keys and values). The
// values are shared with the events that carried them, but nothing else
// keeps them once the live index lets them go (ADR-041): enough for the
// rows of `make bench`'s working set (5,500 keys of 1 KiB with their
// keys and entries), which the index's 6 MiB of values alone would not.
const replicaRowsBytes = 8 << 20

func (m *replicaRows) get(k string) (*mvccpb.KeyValue, bool) {
	if kv, ok := m.cur[k]; ok {
		return kv, true
	}
	kv, ok := m.old[k]
	if ok {
		m.put(k, kv)
	}
	return kv, ok
}

func (m *replicaRows) put(k string, kv *mvccpb.KeyValue) {
	if m.cur == nil {
		m.cur = map[string]*mvccpb.KeyValue{}
	}
	if was, ok := m.cur[k]; ok {
		m.bytes -= replicaRowSize(k, was)
	}
	m.cur[k] = kv
	m.bytes += replicaRowSize(k, kv)
	if m.bytes > replicaRowsBytes/2 {
		m.old, m.cur, m.bytes = m.cur, map[string]*mvccpb.KeyValue{}, 0
	}
}

// replicaRowSize is what an entry costs: key, value and about what the map and
// the row's struct take besides.
func replicaRowSize(k string, kv *mvccpb.KeyValue) int { return len(k) + 64 + len(kv.GetValue()) }

func (m *replicaRows) clear() { *m = replicaRows{} }

// failedQuerier runs nothing and fails every statement with err.
type failedQuerier struct{ err error }

func (f failedQuerier) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, f.err
}

func (f failedQuerier) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, f.err
}

// QueryRowContext answers through a pool that cannot connect: only
// database/sql makes a Row that carries an error.
func (f failedQuerier) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	db := sql.OpenDB(failedConnector(f))
	defer db.Close()
	return db.QueryRowContext(ctx, q, args...)
}

type failedConnector struct{ err error }

func (c failedConnector) Connect(context.Context) (driver.Conn, error) { return nil, c.err }
func (c failedConnector) Driver() driver.Driver                        { return c }
func (c failedConnector) Open(string) (driver.Conn, error)             { return nil, c.err }

// forget stops batches assuming after a batch failed with err, unless
// only a row it assumed was wrong (ErrAssumedRows): then no other replica
// committed, and the rest of what this replica remembers holds. The batch
// that runs again reads the row, and its commit remembers it.
func (b *replicaBatcher) forget(err error) {
	// The batch runs again, and must read this time.
	b.readNext = errors.Is(err, ErrAssumption)
	if errors.Is(err, ErrAssumedRows) {
		return
	}
	b.known = false
	b.calm = 0
}
