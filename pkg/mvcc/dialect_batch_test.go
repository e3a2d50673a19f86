package mvcc_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// The write batch on every database (the dialect suite, dialects_test.go).

func rangeOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func deleteRangeOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func modIs(k string, rev int64) []*pb.Compare {
	return []*pb.Compare{{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}}
}

// txnResp runs a Txn that must not fail.
func txnResp(t *testing.T, s *mvcc.Store, r *pb.TxnRequest) *pb.TxnResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := s.Txn(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A batch sees its own writes: a range or a delete inside it reads the
// puts before it, which a shared database's batch holds back until it
// commits or reads.
func TestBatchReadsItsOwnWrites(t *testing.T) {
	eachBackend(t, backends, func(t *testing.T, b backend, db *testDB) {
		s := db.open(t, mvcc.Options{})
		resp := txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("a/1"), "x", 0), putOp([]byte("a/2"), "y", 0), rangeOp("a/", "a0")}})
		if got := resp.Responses[2].GetResponseRange(); got.Count != 2 || len(got.Kvs) != 2 {
			t.Fatalf("range after puts in one txn: count %d, %d kvs; want 2", got.Count, len(got.Kvs))
		}
		resp = txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{deleteRangeOp("a/", "a0"), putOp([]byte("b"), "z", 0), rangeOp("a/", "a0")}})
		if got := resp.Responses[0].GetResponseDeleteRange(); got.Deleted != 2 {
			t.Fatalf("deleted %d, want 2", got.Deleted)
		}
		if got := resp.Responses[2].GetResponseRange(); got.Count != 0 {
			t.Fatalf("range after delete in one txn: count %d, want 0", got.Count)
		}
		db.checkTables(t)
	})
}

// A batch larger than one statement or packet carries goes in parts
// (PostgreSQL's 32 MiB statements, MySQL's packets under half of
// max_allowed_packet), and the parts agree with the rest of the batch.
func TestLargeBatchGoesInParts(t *testing.T) {
	eachBackend(t, backends, func(t *testing.T, b backend, db *testDB) {
		s := db.open(t, mvcc.Options{})
		big := string(bytes.Repeat([]byte("v"), 12<<20))
		txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("big/1"), big, 0), putOp([]byte("big/2"), big, 0)}})
		resp := txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("big/1"), "small", 0), putOp([]byte("big/3"), big, 0), putOp([]byte("big/4"), big, 0), deleteRangeOp("big/2", ""), rangeOp("big/", "big0")}})
		if got := resp.Responses[4].GetResponseRange(); got.Count != 3 {
			t.Fatalf("range: count %d, want 3", got.Count)
		}
		db.checkTables(t)
	})
}

// Many clients at once, through two replicas where the database takes
// them (so batches hold many requests, several on one key, and the
// replicas' batches interleave): the log and current agree, revisions have
// no holes, and every write is there.
func TestConcurrentBatches(t *testing.T) {
	eachBackend(t, backends, func(t *testing.T, b backend, db *testDB) {
		stores := []*mvcc.Store{db.open(t, mvcc.Options{})}
		if b.replicas {
			stores = append(stores, db.open(t, mvcc.Options{}))
		}
		const clients, perClient, keys = 16, 30, 16
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for c := range clients {
			s := stores[c%len(stores)]
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for i := range perClient {
					k := fmt.Sprintf("k/%d", (c*perClient+i)%keys)
					ops := []*pb.RequestOp{putOp([]byte(k), fmt.Sprintf("%d-%d", c, i), 0)}
					if i%4 == 3 {
						ops = []*pb.RequestOp{deleteRangeOp(k, "")}
					}
					cmp := []*pb.Compare{{Key: []byte(k), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: -1}}}
					if _, err := s.Txn(ctx, &pb.TxnRequest{Compare: cmp, Success: ops}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		db.checkTables(t)
	})
}

// A batch the database refuses certainly did not commit, though its
// writes and COMMIT went out together: its requests are retried one by
// one, and only the one the database refuses fails. (Taken for a commit
// of unknown outcome, every request of the batch would fail.) The writer
// is held at its first batch while the other two queue up behind it, so
// that they go in one batch.
func TestRefusedBatchIsRetried(t *testing.T) {
	eachBackend(t, backends, func(t *testing.T, b backend, db *testDB) {
		s := db.open(t, mvcc.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, q := range db.refuse {
			if _, err := db.raw.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		release, err := s.HoldWriter()
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		put := func(k string) <-chan error {
			done := make(chan error, 1)
			go func() {
				_, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte(k), "v", 0)}})
				done <- err
			}()
			return done
		}
		first := put("first")
		eventually(t, "the writer waiting at the first put's batch", func() bool { return s.WriterInDB() && s.QueuedWrites() == 0 })
		good, bad := put("good"), put("bad")
		eventually(t, "two puts queued behind it", func() bool { return s.QueuedWrites() == 2 })
		release()
		if err := <-first; err != nil {
			t.Fatalf("first: %v", err)
		}
		if err := <-good; err != nil {
			t.Fatalf("a put batched with one the database refuses failed: %v", err)
		}
		if err := <-bad; err == nil || !strings.Contains(err.Error(), "refused by the test") {
			t.Fatalf("the refused put: got %v, want the database's refusal", err)
		}
		db.checkTables(t)
	})
}

// A replica that remembers a key's row assumes it (one round trip); when
// another replica changed it meanwhile, before this one's tailer has read
// the change (its tailer held), the check under the lock fails, nothing
// is written, and the batch runs again on what the database holds. The
// tailer is let go once the check has missed: the answer is published
// after the tailer has read up to the database's revision.
func TestAssumptionCheckedUnderTheLock(t *testing.T) {
	eachBackend(t, replicated, func(t *testing.T, be backend, db *testDB) {
		a, b := db.open(t, mvcc.Options{}), db.open(t, mvcc.Options{})
		calm := func() {
			for i := range 8 {
				txnResp(t, a, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(fmt.Appendf(nil, "warm/%d", i), "x", 0)}})
			}
		}
		missed := func() float64 { return assumedBatches(t, "missed") }
		// behind runs other on b, then r on a before a's tailer has read
		// b's write (held), and waits for a's batch to miss what it
		// assumed under the lock before it lets the tailer go.
		behind := func(other, r *pb.TxnRequest) *pb.TxnResponse {
			t.Helper()
			release := a.HoldTailer()
			var once sync.Once
			defer once.Do(release)
			if resp := txnResp(t, b, other); !resp.Succeeded {
				t.Fatalf("b's write failed: %v", resp)
			}
			before := missed()
			answer := make(chan *pb.TxnResponse, 1)
			go func() {
				resp, err := a.Txn(context.Background(), r)
				if err != nil {
					t.Error(err)
				}
				answer <- resp
			}()
			eventually(t, "a's batch missing what it assumed", func() bool { return missed() > before })
			once.Do(release)
			return <-answer
		}

		created := txnResp(t, a, &pb.TxnRequest{Compare: modIs("k", 0), Success: []*pb.RequestOp{putOp([]byte("k"), "a1", 0)}}).Header.Revision
		calm()
		r := behind(&pb.TxnRequest{Compare: modIs("k", created), Success: []*pb.RequestOp{putOp([]byte("k"), "b1", 0)}},
			&pb.TxnRequest{Compare: modIs("k", created), Success: []*pb.RequestOp{putOp([]byte("k"), "a2", 0)}, Failure: []*pb.RequestOp{rangeOp("k", "")}})
		if r == nil || r.Succeeded {
			t.Fatalf("a's update at the revision it remembered, over b's: %v", r)
		}
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "b1" {
			t.Fatalf("a's failed update read %v, want k = b1", kvs)
		}

		// A create of a key b made, which a never saw: a guesses it absent.
		calm()
		if r := behind(&pb.TxnRequest{Compare: modIs("x", 0), Success: []*pb.RequestOp{putOp([]byte("x"), "b", 0)}},
			&pb.TxnRequest{Compare: modIs("x", 0), Success: []*pb.RequestOp{putOp([]byte("x"), "a", 0)}}); r == nil || r.Succeeded {
			t.Fatalf("a created x over b's: %v", r)
		}
		db.checkTables(t)
	})
}

// assumedBatches is quantykube_write_batch_assumed_total{result} in this
// process.
func assumedBatches(t *testing.T, result string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "quantykube_write_batch_assumed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
