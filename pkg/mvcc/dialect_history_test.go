package mvcc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// History and imports on every database (the dialect suite,
// dialects_test.go).

// History's reads agree with each other and with Range: a Get at a time
// with the revision it resolves to, a key's Log (prev_kv chained in Go)
// with the same entries read through a range's Log (prev_kv joined in
// SQL), a page that starts mid-chain with the chain, and a range at a
// revision, page by page, with Range at that revision.
func TestHistoryReadsAgree(t *testing.T) {
	eachBackend(t, backends, func(t *testing.T, b backend, db *testDB) {
		ctx := context.Background()
		var mu sync.Mutex
		now := time.Unix(1_800_000_000, 0)
		s := db.open(t, mvcc.Options{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
		var times []int64
		write := func(ops ...*pb.RequestOp) {
			t.Helper()
			txnResp(t, s, &pb.TxnRequest{Success: ops})
			mu.Lock()
			times = append(times, now.UnixMilli())
			now = now.Add(time.Second)
			mu.Unlock()
		}
		write(putOp([]byte("/h/a"), "a1", 0))
		write(putOp([]byte("/h/b"), "b1", 0))
		write(putOp([]byte("/h/a"), "a2", 0), putOp([]byte("/h/b"), "b2", 0))
		write(deleteRangeOp("/h/a", ""))
		write(putOp([]byte("/h/a"), "a3", 0))
		for i := range 20 {
			k := fmt.Sprintf("/h/s/%02d", i%7)
			if i%5 == 4 {
				write(deleteRangeOp(k, ""))
			} else {
				write(putOp([]byte(k), fmt.Sprint("v", i), 0))
			}
		}

		for _, ms := range append(times, times[0]-1, times[len(times)-1]+500) {
			for _, key := range []string{"/h/a", "/h/b", "/h/none"} {
				rev, kv, err := s.KeyAtTime(ctx, []byte(key), ms)
				if err != nil {
					t.Fatal(err)
				}
				wantRev, err := s.RevisionAt(ctx, []byte(key), ms)
				if err != nil {
					t.Fatal(err)
				}
				want, err := s.KeyAt(ctx, []byte(key), wantRev)
				if err != nil {
					t.Fatal(err)
				}
				if rev != wantRev || fmt.Sprint(kv) != fmt.Sprint(want) {
					t.Fatalf("KeyAtTime(%s, %d) = %d %v, want %d %v", key, ms, rev, kv, wantRev, want)
				}
			}
		}

		all, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.PrefixRange([]byte("/h/")), Limit: 100, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"/h/a", "/h/b"} {
			one, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte(key), nil), Limit: 100, MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			var want []*mvcc.Event
			for _, e := range all.Events {
				if string(e.Kv.Key) == key {
					want = append(want, e)
				}
			}
			if len(one.Events) != len(want) || len(want) < 2 {
				t.Fatalf("log of %s: %d entries, the range log has %d", key, len(one.Events), len(want))
			}
			for i := range want {
				if fmt.Sprint(one.Events[i]) != fmt.Sprint(want[i]) {
					t.Fatalf("log of %s, entry %d:\n%v\nthe range log says\n%v", key, i, one.Events[i], want[i])
				}
			}
			page, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte(key), nil), After: mvcc.LogCursor{Rev: want[0].Rev(), Sub: 1 << 30}, Limit: 100, MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(page.Events[0]) != fmt.Sprint(want[1]) {
				t.Fatalf("log of %s after its first entry: %v, want %v", key, page.Events[0], want[1])
			}
		}

		kr := mvcc.PrefixRange([]byte("/h/s/"))
		for rev := int64(1); rev <= s.Rev(); rev++ {
			want, err := s.Range(ctx, &pb.RangeRequest{Key: kr.Key, RangeEnd: kr.End, Revision: rev})
			if err != nil {
				t.Fatal(err)
			}
			for _, limit := range []int{1, 3, 500} {
				var got []*mvccpb.KeyValue
				q := mvcc.RangeAtQuery{Range: kr, Rev: rev, Limit: limit, MaxBytes: 3 << 20}
				for pages := 0; ; pages++ {
					page, err := s.RangeAt(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, page.Kvs...)
					if !page.More || pages > 100 {
						break
					}
					q.After = page.Next
				}
				if len(got) != len(want.Kvs) {
					t.Fatalf("rev %d, limit %d: %d keys, want %d", rev, limit, len(got), len(want.Kvs))
				}
				for i := range got {
					if !proto.Equal(got[i], want.Kvs[i]) {
						t.Fatalf("rev %d, limit %d: key %d is %v, want %v", rev, limit, i, got[i], want.Kvs[i])
					}
				}
			}
		}
	})
}

// A replica that did not prune still learns the retention floor another
// replica set, so its History refuses revisions whose rows are gone.
func TestReplicaFollowsRetentionFloor(t *testing.T) {
	eachBackend(t, replicated, func(t *testing.T, be backend, db *testDB) {
		ctx := context.Background()
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		opts := mvcc.Options{Now: clock.Now, Retain: mvcc.MinRetain, PruneInterval: time.Hour}
		a, b := db.open(t, opts), db.open(t, opts)
		for i := range 20 {
			putKey(t, ctx, a, "/f/k", fmt.Sprint(i), 0)
			clock.Advance(10 * time.Second)
		}
		if n, err := a.Prune(ctx); err != nil || n == 0 {
			t.Fatalf("prune: %d rows, %v", n, err)
		}
		want, err := a.HistoryFloor(ctx, []byte("/f/k"))
		if err != nil || want.Rev <= 1 {
			t.Fatalf("floor on the pruning replica: %v, %v", want, err)
		}
		eventually(t, "the other replica's floor at the pruning one's", func() bool {
			got, err := b.HistoryFloor(ctx, []byte("/f/k"))
			if err != nil {
				t.Fatal(err)
			}
			return got == want && b.RetainFloor() == a.RetainFloor()
		})
	})
}

// An import is refused while a server is connected to the database (its
// row in meta, or on PostgreSQL its LISTEN connection's lock), and runs
// once it has stopped; a server opening the store is refused while the
// import runs, and opens it once the import has ended.
func TestImportRefusesWhileServed(t *testing.T) {
	eachBackend(t, replicated, func(t *testing.T, be backend, db *testDB) {
		ctx := t.Context()
		s, err := mvcc.Open(ctx, db.dialect(), mvcc.Options{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		servers := func() int {
			var n int
			if err := db.raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		eventually(t, "the server's row in meta", func() bool { return servers() > 0 })
		im, err := mvcc.BeginImport(ctx, db.dialect(), mvcc.ImportOptions{Logger: quietLog})
		if err == nil {
			im.Close()
			t.Fatal("import into a served database: no error")
		}
		if !strings.Contains(err.Error(), "a QuantyKube server is connected to") {
			t.Errorf("import into a served database: %v", err)
		}
		s.Close()
		// The server's session lets go of what it held as it ends, just
		// after the client closed it: the import runs once it has.
		eventually(t, "an import once the server stopped", func() bool {
			im, err = mvcc.BeginImport(ctx, db.dialect(), mvcc.ImportOptions{Logger: quietLog})
			return err == nil
		})
		if s, err := mvcc.Open(ctx, db.dialect(), mvcc.Options{Logger: quietLog}); err == nil {
			s.Close()
			im.Close()
			t.Fatal("a server opened the store during an import")
		} else if !strings.Contains(err.Error(), "an import into") {
			t.Errorf("a server opening the store during an import: %v", err)
		}
		im.Close()
		s, err = mvcc.Open(ctx, db.dialect(), mvcc.Options{Logger: quietLog})
		if err != nil {
			t.Fatalf("a server once the import ended: %v", err)
		}
		s.Close()
	})
}
