package mvcc

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// batcher opens the transaction of each write batch. Which one a store
// uses is decided once, when it opens: a sqliteBatcher where this process
// is the only writer (SQLite), a replicaBatcher where replicas share the
// database (PostgreSQL or MySQL). The writer and the evaluation of requests see
// only the interfaces below.
type batcher interface {
	// begin opens the transaction of a batch of reqs (a batcher may read
	// ahead the rows they name) and returns it with the committed state it
	// starts from.
	begin(ctx context.Context, reqs []*writeReq) (batchTx, BatchStart, error)
}

// batchTx is one write batch's transaction: the current rows as the batch
// sees them (its own writes first), and writes of new revisions. Every
// error it returns is a failure of the database.
type batchTx interface {
	// get is key's current row (nil: absent).
	get(key []byte) (*mvccpb.KeyValue, error)
	// scan is the current rows in kr in key order (lease != 0: only the
	// rows attached to that lease, whatever their key).
	scan(kr KeyRange, lease int64) ([]*mvccpb.KeyValue, error)
	// put writes kv, its key's state as of kv.ModRevision, as change sub
	// of that revision, committed at unixMs.
	put(kv *mvccpb.KeyValue, sub, unixMs int64) error
	// del deletes key as change sub of revision rev, committed at unixMs.
	del(key []byte, rev, sub, unixMs int64) error
	// flush sends the writes held back so far, before anything reads the
	// tables through q (a no-op where writes go out as they are made).
	flush() error

	// q is the transaction, for Range ops and the leases table.
	q() querier
	// leaseExpired reports whether lease id exists and its deadline has
	// passed, where deadlines are kept (memory, or the database's clock
	// under a row lock so that two replicas cannot expire it twice).
	leaseExpired(id int64) (bool, error)

	// commit records end in meta and commits. A failed commit may still
	// have taken effect: the batcher starts the next batch from the
	// database, and an error it cannot retry safely is errCommitUnknown.
	commit(end batchEnd) error
	rollback()
}

// rangeDeleter is a batchTx that deletes a range of keys in a few
// statements instead of two per key (delete_sqlite.go). done is false when
// it cannot here: the caller scans the range and deletes key by key.
type rangeDeleter interface {
	// deleteRange deletes every current row in kr as changes sub, sub+1,
	// ... of revision rev, in key order, and returns those rows.
	deleteRange(kr KeyRange, rev, sub, unixMs int64) (prevs []*mvccpb.KeyValue, done bool, err error)
}

// batchEnd is the state a batch leaves behind, written to meta at commit.
type batchEnd struct {
	start   BatchStart
	rev     int64
	compact int64
	unixMs  int64
	leases  bool // the batch granted or revoked a lease
	// changes is how many key changes (events) the batch wrote: the
	// load that spaces SQLite's background checkpoints (checkpointEvery).
	changes int
}

// next is the committed state the batch after this one starts from:
// meta's last batch time and writer's mark move only with the revision.
func (e batchEnd) next(writer int64) BatchStart {
	st := BatchStart{Rev: e.rev, Compact: e.compact, LastUnixMs: e.start.LastUnixMs, Writer: e.start.Writer}
	if e.rev != e.start.Rev {
		st.LastUnixMs, st.Writer = e.unixMs, writer
	}
	return st
}

// batch is one write batch while its requests are applied (txn.go,
// lease.go): the revision and floor as they move, and what the batch did.
type batch struct {
	ctx     context.Context
	tx      batchTx
	s       *Store
	rev     int64 // moves by one with each request that changes something
	compact int64 // Compact's floor, moved by Compact requests
	unixMs  int64 // the batch's commit time
	events  []*Event
	granted map[int64]int64 // leases granted in the batch: id -> ttl
	revoked map[int64]bool
}

// staged holds the current rows a batch has read or written, so that each
// request sees the requests before it: nil is a key known to be absent.
type staged map[string]*mvccpb.KeyValue

// batchKeys lists, once each, the single keys a batch's transactions
// compare or put (nested ones too): the rows the writer will need.
func batchKeys(reqs []*writeReq) [][]byte {
	seen := map[string]bool{}
	var keys [][]byte
	for _, r := range reqs {
		if r.kind == wTxn && r.txn != nil {
			walkTxn(r.txn, func(k []byte) {
				if len(k) > 0 && !seen[string(k)] {
					seen[string(k)] = true
					keys = append(keys, k)
				}
			})
		}
	}
	return keys
}
