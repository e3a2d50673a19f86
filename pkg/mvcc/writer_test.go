package mvcc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// TestAbandonedWriteNotApplied: a write whose caller gave up while it was
// queued behind a held-up writer is not applied once the writer resumes;
// the writes around it are, each at the next revision.
func TestAbandonedWriteNotApplied(t *testing.T) {
	s := openStore(t, mvcc.Options{})
	ctx := context.Background()
	release, err := s.HoldWriter()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var wg sync.WaitGroup
	var headRev int64
	wg.Go(func() {
		r, err := s.Txn(ctx, txnPut("/head", "h"))
		if err != nil {
			t.Error(err)
			return
		}
		headRev = r.Header.Revision
	})
	// The writer takes it, and waits for its connection.
	for deadline := time.Now().Add(30 * time.Second); !s.WriterInDB() || s.QueuedWrites() > 0; {
		if time.Now().After(deadline) {
			t.Fatal("30 s on, the writer has not taken the head request")
		}
		time.Sleep(time.Millisecond)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.Txn(short, txnPut("/abandoned", "a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write queued behind a held writer past its deadline: %v, want DeadlineExceeded", err)
	}
	if s.QueuedWrites() != 1 {
		t.Fatalf("%d writes queued, want the abandoned one", s.QueuedWrites())
	}
	release()
	wg.Wait()
	r, err := s.Txn(ctx, txnPut("/after", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if headRev != 2 || r.Header.Revision != 3 {
		t.Errorf("the head and the write after took revisions %d and %d, want 2 and 3", headRev, r.Header.Revision)
	}
	got, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/abandoned")})
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 0 {
		t.Errorf("the abandoned write was applied: %v", got.Kvs)
	}
}
