package mvcc_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func put(t testing.TB, s *mvcc.Store, key string, value []byte) int64 {
	t.Helper()
	resp, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// Under steady churn with retention, the database file reaches a size and
// stays there: pruned pages are reused, not appended after.
func TestPrunedDatabaseStopsGrowing(t *testing.T) {
	ctx := context.Background()
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	s, err := mvcc.Open(ctx, d, mvcc.Options{Now: clock.Now, Retain: mvcc.MinRetain, PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	value := bytes.Repeat([]byte("v"), 1024)
	const keys, rounds, perRound = 50, 12, 500
	var sizes []int64
	for r := range rounds {
		for i := range perRound {
			put(t, s, fmt.Sprintf("/registry/configmaps/k%02d", i%keys), value)
			clock.Advance(time.Second)
		}
		if _, err := s.Prune(ctx); err != nil {
			t.Fatal(err)
		}
		total, _, err := s.DBSize(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, total)
		t.Logf("round %d: revision %d, floor %d, db %d bytes", r, s.Rev(), s.RetainFloor(), total)
	}
	if s.RetainFloor() < s.Rev()-int64(mvcc.MinRetain/time.Second)-1 {
		t.Fatalf("retention floor %d lags revision %d by more than the 75 s window", s.RetainFloor(), s.Rev())
	}
	// 6,000 revisions of 1 KiB pass through; only ~125 rows are ever live.
	if last, early := sizes[len(sizes)-1], sizes[2]; last > early+early/5 {
		t.Fatalf("database grew from %d to %d bytes under steady churn: %v", early, last, sizes)
	}
	// Everything inside the window is still there, exactly.
	floor, err := s.HistoryFloor(ctx, []byte("/registry/configmaps/k00"))
	if err != nil {
		t.Fatal(err)
	}
	for rev := floor.Rev; rev <= s.Rev(); rev += 7 {
		if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Revision: rev}); err != nil {
			t.Fatalf("range at %d (floor %d): %v", rev, floor.Rev, err)
		}
	}
	if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/"), Revision: floor.Rev - 1}); err == nil {
		t.Fatalf("range below the retention floor %d answered", floor.Rev)
	}
}
