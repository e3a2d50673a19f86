package mvcc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// TestReadsBetweenCommitAndPublish holds the contract of kv.go's ReadView:
// a response reports only a revision every read that starts after it sees.
// On SQLite a read's snapshot may hold a batch the writer has committed
// and not yet published; reads of the live index do not see it yet, so no
// read may report it or show its changes: not a Range at a past revision
// (SQL), not one at the latest revision when the live index does not serve
// (SQL), not History's Log. Issue 52: a Range at an older revision
// reported the unpublished revision, and a Get started after it answered
// an older one.
func TestReadsBetweenCommitAndPublish(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts mvcc.Options
	}{
		{"live index", mvcc.Options{}},
		{"no live index", mvcc.Options{DisableLiveIndex: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, tc.opts)
			put := func(key, value string) int64 {
				t.Helper()
				r, err := s.Txn(ctx, txnPut(key, value))
				if err != nil {
					t.Fatal(err)
				}
				return r.Header.Revision
			}
			put("/a", "1") // 2
			put("/a", "2") // 3

			committed, release := s.HoldPublish()
			defer release()
			done := make(chan int64, 1)
			go func() {
				r, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/a"), "3", 0), putOp([]byte("/b"), "1", 0)}})
				if err != nil {
					t.Error(err)
				}
				done <- r.GetHeader().GetRevision()
			}()
			<-committed // revision 4 is in the database, not yet published

			get := func(r *pb.RangeRequest) *mvcc.RangeResult {
				t.Helper()
				res, err := s.Range(ctx, r)
				if err != nil {
					t.Fatalf("Range %q at %d: %v", r.Key, r.Revision, err)
				}
				return res
			}
			for _, r := range []*pb.RangeRequest{
				{Key: []byte("/a"), Revision: 2},
				{Key: []byte("/a")},
				{Key: []byte("/"), RangeEnd: []byte("0")},
				{Key: []byte("/"), RangeEnd: []byte("0"), Revision: 2},
				{Key: []byte("/"), RangeEnd: []byte("0"), CountOnly: true},
			} {
				res := get(r)
				if res.Rev != 3 {
					t.Errorf("Range %q to %q at %d while revision 4 is committed and not published: header revision %d, want 3", r.Key, r.RangeEnd, r.Revision, res.Rev)
				}
				want := "1"
				if r.Revision == 0 {
					want = "2"
				}
				if res.Count != 1 || (!r.CountOnly && (len(res.Kvs) != 1 || string(res.Kvs[0].Value) != want)) {
					t.Errorf("Range %q to %q at %d: count %d, kvs %v; want /a=%s alone", r.Key, r.RangeEnd, r.Revision, res.Count, res.Kvs, want)
				}
			}
			if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/a"), Revision: 4}); !errors.Is(err, mvcc.ErrFutureRev) {
				t.Errorf("Range at the unpublished revision 4: %v, want ErrFutureRev", err)
			}
			page, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("/"), []byte("0")), Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if page.HeaderRev != 3 || len(page.Events) != 2 || page.More {
				t.Errorf("History's Log while revision 4 is not published: header %d, %d changes (more %v); want header 3 and the changes of revisions 2 and 3", page.HeaderRev, len(page.Events), page.More)
			}

			release()
			if rev := <-done; rev != 4 {
				t.Fatalf("the held write answered revision %d, want 4", rev)
			}
			if res := get(&pb.RangeRequest{Key: []byte("/a"), Revision: 2}); res.Rev != 4 {
				t.Errorf("Range at 2 once revision 4 is published: header revision %d, want 4", res.Rev)
			}
			if res := get(&pb.RangeRequest{Key: []byte("/"), RangeEnd: []byte("0")}); res.Rev != 4 || res.Count != 2 {
				t.Errorf("Range of every key once revision 4 is published: revision %d, count %d; want 4 and 2", res.Rev, res.Count)
			}
		})
	}
}

// TestHistoryAtTimeBetweenCommitAndPublish is the same rule for History's
// reads by time: a batch committed at or before the time asked for but
// not yet published is not the answer.
func TestHistoryAtTimeBetweenCommitAndPublish(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(1_000_000)
	s := openStore(t, mvcc.Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	for i, v := range []string{"1", "2"} { // revisions 2 and 3
		now.Store(int64(1_000_000 + 1000*i))
		if _, err := s.Txn(ctx, txnPut("/a", v)); err != nil {
			t.Fatal(err)
		}
	}
	now.Store(1_002_000)
	committed, release := s.HoldPublish()
	defer release()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := s.Txn(ctx, txnPut("/a", "3")); err != nil {
			t.Error(err)
		}
	}()
	<-committed // revision 4, committed at 1,002,000, not yet published
	if rev, err := s.RevisionAt(ctx, []byte("/a"), 1_002_000); err != nil || rev != 3 {
		t.Errorf("RevisionAt the unpublished batch's time: %d, %v; want 3", rev, err)
	}
	rev, kv, err := s.KeyAtTime(ctx, []byte("/a"), 1_002_000)
	if err != nil || rev != 3 || kv == nil || string(kv.Value) != "2" {
		t.Errorf("KeyAtTime the unpublished batch's time: revision %d, %v, %v; want 3 and /a=2", rev, kv, err)
	}
	if rev, ok, err := s.FirstRevisionFrom(ctx, mvcc.NewKeyRange([]byte("/a"), nil), 1_001_500, false); err != nil || ok {
		t.Errorf("FirstRevisionFrom a time only the unpublished batch follows: %d, %v, %v; want none", rev, ok, err)
	}
	release()
	<-done
	if rev, kv, err := s.KeyAtTime(ctx, []byte("/a"), 1_002_000); err != nil || rev != 4 || string(kv.GetValue()) != "3" {
		t.Errorf("KeyAtTime once published: revision %d, %v, %v; want 4 and /a=3", rev, kv, err)
	}
}

func txnPut(key, value string) *pb.TxnRequest {
	return &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte(key), value, 0)}}
}
