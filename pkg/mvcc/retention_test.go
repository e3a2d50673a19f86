package mvcc_test

import (
	"bytes"
	"context"
	"errors"
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
// stays there: pruned pages are reused, not appended after. And pruning
// keeps the window exactly: the floor is the newest revision committed 75 s
// before now, and the state at every revision from it on is what was
// written.
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
	// Each write is one revision, one second after the one before, of a
	// 1 KiB value that names it.
	type write struct {
		key   string
		value []byte
		rev   int64
		at    time.Time
	}
	var writes []write
	const keys, rounds, perRound = 50, 12, 500
	var sizes []int64
	for r := range rounds {
		for i := range perRound {
			w := write{key: fmt.Sprintf("/registry/configmaps/k%02d", i%keys), value: bytes.Repeat([]byte("v"), 1024), at: clock.Now()}
			copy(w.value, fmt.Sprintf("round %d write %d ", r, i))
			w.rev = put(t, s, w.key, w.value)
			writes = append(writes, w)
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
	// 6,000 revisions of 1 KiB pass through; only ~125 rows are ever live.
	if last, early := sizes[len(sizes)-1], sizes[2]; last > early+early/5 {
		t.Fatalf("database grew from %d to %d bytes under steady churn: %v", early, last, sizes)
	}

	// The floor is the newest revision committed at or before now - 75 s.
	cutoff := clock.Now().Add(-mvcc.MinRetain)
	var floor, floorMs int64
	for _, w := range writes {
		if !w.at.After(cutoff) {
			floor, floorMs = w.rev, w.at.UnixMilli()
		}
	}
	if got := s.RetainFloor(); got != floor {
		t.Fatalf("retention floor %d, want %d (the newest revision committed %v before now)", got, floor, mvcc.MinRetain)
	}
	if f, err := s.HistoryFloor(ctx, []byte("/registry/configmaps/k00")); err != nil || f.Rev != floor || f.UnixMs != floorMs {
		t.Fatalf("History floor %+v (%v), want revision %d at %d", f, err, floor, floorMs)
	}
	// Everything inside the window is still there, exactly: every key at
	// every revision from the floor on, as the writes up to it left it.
	type kv struct {
		value                []byte
		create, mod, version int64
	}
	state := map[string]kv{}
	for _, w := range writes {
		k := state[w.key]
		if k.create == 0 {
			k.create = w.rev
		}
		state[w.key] = kv{w.value, k.create, w.rev, k.version + 1}
		if w.rev < floor {
			continue
		}
		resp, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Revision: w.rev})
		if err != nil {
			t.Fatalf("range at %d (floor %d): %v", w.rev, floor, err)
		}
		if len(resp.Kvs) != len(state) {
			t.Fatalf("range at %d (floor %d): %d keys, want %d", w.rev, floor, len(resp.Kvs), len(state))
		}
		for _, got := range resp.Kvs {
			want := state[string(got.Key)]
			if !bytes.Equal(got.Value, want.value) || got.CreateRevision != want.create || got.ModRevision != want.mod || got.Version != want.version {
				t.Fatalf("range at %d (floor %d): %s = %.24q create %d mod %d version %d, want %.24q create %d mod %d version %d",
					w.rev, floor, got.Key, got.Value, got.CreateRevision, got.ModRevision, got.Version, want.value, want.create, want.mod, want.version)
			}
		}
	}
	if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/"), Revision: floor - 1}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("range below the retention floor %d: %v, want %v", floor, err, mvcc.ErrCompacted)
	}
}
