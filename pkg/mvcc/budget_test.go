package mvcc_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// churn writes n revisions spread over keys under prefix, size bytes
// each, 16 writes in flight at once.
func churn(t *testing.T, s *mvcc.Store, prefix string, keys, n, size int) {
	t.Helper()
	value := make([]byte, size)
	for i := 0; i < n; i += 16 {
		var wg sync.WaitGroup
		for k := i; k < min(i+16, n); k++ {
			wg.Go(func() { put(t, s, fmt.Sprintf("%sk%03d", prefix, k%keys), value) })
		}
		wg.Wait()
	}
}

// A byte budget bounds history inside the time window: oldest changes go
// first, the live state never does (a key written once, before all the
// churn, is still there), the log ends at most the live state plus the
// budget (and a bucket's worth of slack), and a read below the new floor
// answers OUT_OF_RANGE naming it.
func TestRetainBytesBoundsHistory(t *testing.T) {
	const budget = 256 << 10
	onBackends(t, mvcc.Options{Retain: 24 * time.Hour, RetainBytes: budget, PruneInterval: time.Hour}, func(t *testing.T, s *mvcc.Store) {
		ctx := context.Background()
		first := put(t, s, "/keep/once", []byte("written before everything"))
		churn(t, s, "/churn/", 20, 4000, 200)
		before, _, err := s.LogBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prune(ctx); err != nil {
			t.Fatal(err)
		}
		all, live, err := s.LogBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		floor := s.RuleFloor("/churn/k000")
		t.Logf("log %d bytes before, %d after (live %d, budget %d); floor %d of %d", before, all, live, budget, floor.Rev, s.Rev())
		if floor.Rev <= first || floor.Rev >= s.Rev() {
			t.Fatalf("floor %d: want it raised past the first writes and below %d", floor.Rev, s.Rev())
		}
		// A bucket is 256 changes of about 2 x 210 bytes.
		if slack := int64(256 * 2 * 220); all > live+budget+slack {
			t.Errorf("the log holds %d bytes: more than the live state %d plus the budget %d (and %d of slack)", all, live, budget, slack)
		}
		if all < budget/2 {
			t.Errorf("the log holds %d bytes: the budget of %d kept far less than it allows", all, budget)
		}
		r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/keep/once")})
		if err != nil || len(r.Kvs) != 1 || r.Kvs[0].ModRevision != first {
			t.Fatalf("the key written first: %v, %v", r, err)
		}
		_, err = s.KeyAt(ctx, []byte("/churn/k000"), floor.Rev-1)
		var oor *mvcc.OutOfRangeError
		if !errors.As(err, &oor) || !strings.Contains(oor.Msg, fmt.Sprint(floor.Rev)) {
			t.Errorf("a read below the floor: %v, want OUT_OF_RANGE naming %d", err, floor.Rev)
		}
		if _, err := s.KeyAt(ctx, []byte("/churn/k000"), floor.Rev); err != nil {
			t.Errorf("a read at the floor: %v", err)
		}
	})
}

// A prefix's budget prunes its keys only; the other keys keep their
// window. Restarting keeps the floors, and the accounting goes on from
// them.
func TestRetainBytesPerPrefixAndRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	opts := mvcc.Options{Retain: 24 * time.Hour, RetainBytes: 64 << 20, PruneInterval: time.Hour,
		RetainPrefixes: []mvcc.RetentionRule{{Prefix: []byte("/events/"), Retain: 24 * time.Hour, MaxBytes: 128 << 10}}}
	open := func() *mvcc.Store {
		d, err := sqlite.New("sqlite://"+path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := mvcc.Open(ctx, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	churn(t, s, "/other/", 10, 400, 200)
	churn(t, s, "/events/", 20, 3000, 200)
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	events, other := s.RuleFloor("/events/k000"), s.RuleFloor("/other/k000")
	t.Logf("floors: /events/ %d, default %d, of %d", events.Rev, other.Rev, s.Rev())
	if events.Rev <= 400 || other.Rev != 0 {
		t.Fatalf("floors /events/ %d, default %d: want the events' raised past the other keys' writes, the default's untouched", events.Rev, other.Rev)
	}
	s.Close()

	s = open()
	defer s.Close()
	if got := s.RuleFloor("/events/k000"); got.Rev != events.Rev {
		t.Fatalf("after a restart the events' floor is %d, want %d", got.Rev, events.Rev)
	}
	churn(t, s, "/events/", 20, 1600, 200)
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	again := s.RuleFloor("/events/k000")
	t.Logf("after 1,600 more: /events/ floor %d of %d", again.Rev, s.Rev())
	if again.Rev <= events.Rev {
		t.Fatalf("the events' floor stayed at %d after 1,600 more changes", again.Rev)
	}
}

// A prefix may not keep more than every key may; sizes parse as operators
// write them.
func TestRetainBytesInput(t *testing.T) {
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mvcc.Open(context.Background(), d, mvcc.Options{RetainBytes: 1 << 20,
		RetainPrefixes: []mvcc.RetentionRule{{Prefix: []byte("/e/"), Retain: time.Hour, MaxBytes: 2 << 20}}})
	if err == nil || !strings.Contains(err.Error(), "must not exceed the default rule's") {
		t.Fatalf("a prefix budget over the default's: %v", err)
	}
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "512Mi": 512 << 20, "2Gi": 2 << 30, "2GiB": 2 << 30, "500M": 500e6, "1.5G": 1.5e9, "10KB": 10e3, " 3Ki ": 3 << 10} {
		if got, err := mvcc.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1Gi", "2Qi", "1e30"} {
		if _, err := mvcc.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q): no error", in)
		}
	}
}

// A store over its budget prunes within seconds, not at the next
// PruneInterval (an hour here): the log exceeds the budget by about a
// second's writes.
func TestRetainBytesPrunesWithoutWaiting(t *testing.T) {
	const budget = 64 << 10
	onBackends(t, mvcc.Options{Retain: 24 * time.Hour, RetainBytes: budget, PruneInterval: time.Hour}, func(t *testing.T, s *mvcc.Store) {
		// The loop's first pass, on an empty store, runs a second in.
		time.Sleep(1500 * time.Millisecond)
		churn(t, s, "/churn/", 20, 1000, 200)
		deadline := time.Now().Add(10 * time.Second)
		for s.RetainFloor() == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if s.RetainFloor() == 0 {
			t.Fatalf("not pruned within 10 s of writing %d bytes over a budget of %d", 1000*210, budget)
		}
	})
}
