package mvcc_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// onBackends runs f on a new store on SQLite and on PostgreSQL.
func onBackends(t *testing.T, opts mvcc.Options, f func(t *testing.T, s *mvcc.Store)) {
	t.Run("sqlite", func(t *testing.T) { f(t, openStore(t, opts)) })
	t.Run("postgres", func(t *testing.T) {
		dsn := framework.PostgresDatabase(t)
		f(t, openReplica(t, context.Background(), dialect(t, dsn), opts))
	})
}

// putRevisions writes n revisions of key, each value size bytes of its
// own (its first bytes are its number), several writes in flight at once
// so that the writer commits them in few batches.
func putRevisions(t testing.TB, s *mvcc.Store, key string, n, size int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		v := make([]byte, size)
		copy(v, fmt.Sprintf("%08d", i))
		wg.Go(func() { put(t, s, key, v) })
		if i%16 == 15 {
			wg.Wait()
		}
	}
	wg.Wait()
}

// allocated is how many bytes the heap allocated while f ran, the fewest
// of three runs: the store's own goroutines allocate a little meanwhile.
// The collector is off while it measures: pgx reads a row larger than its
// buffer into one from its own sync.Pool (sized to the next power of two),
// which every collection may empty, so the runs after the first measure
// what a read costs once that buffer is there, as it is under a steady
// load.
func allocated(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	best := ^uint64(0)
	for range 3 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		f()
		runtime.ReadMemStats(&m1)
		best = min(best, m1.TotalAlloc-m0.TotalAlloc)
	}
	return best
}

func pageBytes(evs []*mvcc.Event) int {
	n := 0
	for _, e := range evs {
		n += e.Size()
	}
	return n
}

// History's reads cost about what they return. A Log page of a key with
// 200 revisions of 1 MiB, asked for with limit 10,000 and History's byte
// bound, allocates at most twice the page (Event.Size, prev_kvs included),
// for the key or a range, from the start or from a cursor: a page reads
// its own entries' values only, each once. A Get reads one row, and
// allocates its value once.
func TestHistoryReadsAllocateAboutTheirAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200 MiB")
	}
	const maxBytes = 3 << 20 // history.MaxLogBytes
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		ctx := context.Background()
		putRevisions(t, s, "/big/k", 200, 1<<20)
		for _, tc := range []struct {
			name string
			kr   mvcc.KeyRange
		}{
			{"key", mvcc.NewKeyRange([]byte("/big/k"), nil)},
			{"range", mvcc.NewKeyRange([]byte("/big/"), []byte("/big0"))},
		} {
			for _, after := range []mvcc.LogCursor{{}, {Rev: s.Rev() - 100}} {
				q := mvcc.LogQuery{Range: tc.kr, After: after, Limit: 10000, MaxBytes: maxBytes}
				var page *mvcc.LogPage
				got := allocated(func() {
					var err error
					if page, err = s.Log(ctx, q); err != nil {
						t.Fatal(err)
					}
				})
				size := pageBytes(page.Events)
				t.Logf("%s Log after %d: %d entries, %d bytes; allocated %d bytes (%.2fx)", tc.name, after.Rev, len(page.Events), size, got, float64(got)/float64(size))
				if len(page.Events) == 0 || !page.More || size > maxBytes {
					t.Fatalf("%s Log after %d: %d entries of %d bytes, more %v", tc.name, after.Rev, len(page.Events), size, page.More)
				}
				if got > 2*uint64(size) {
					t.Errorf("%s Log after %d: allocated %d bytes for a page of %d", tc.name, after.Rev, got, size)
				}
			}
		}

		key := []byte("/big/k")
		for _, get := range []struct {
			name string
			f    func() ([]byte, error)
		}{
			{"KeyAt", func() ([]byte, error) {
				kv, err := s.KeyAt(ctx, key, s.Rev()-100)
				return kv.GetValue(), err
			}},
			{"KeyAtTime", func() ([]byte, error) {
				_, kv, err := s.KeyAtTime(ctx, key, time.Now().UnixMilli())
				return kv.GetValue(), err
			}},
		} {
			var value []byte
			got := allocated(func() {
				var err error
				if value, err = get.f(); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%s: a value of %d bytes; allocated %d bytes (%.2fx)", get.name, len(value), got, float64(got)/float64(len(value)))
			if len(value) != 1<<20 {
				t.Fatalf("%s: a value of %d bytes, want %d", get.name, len(value), 1<<20)
			}
			if got > uint64(len(value))*3/2 {
				t.Errorf("%s: allocated %d bytes for a value of %d", get.name, got, len(value))
			}
		}
	})
}

// Walking a Log page by page, with byte bounds that end pages anywhere
// (within a revision too, and after every entry when one entry alone is
// larger than the bound), returns every change exactly once, in order,
// each with its prev_kv, as a watch from the same revision does: for one
// key and for a range, from the start and from a revision. Each page is
// as full as its bounds allow.
func TestLogPagesByBytes(t *testing.T) {
	// Both ways a range is read: through its keys, and through the log.
	for _, c := range []struct {
		name   string
		narrow int
	}{{"by-key", 1 << 20}, {"by-rev", 0}} {
		t.Run(c.name, func(t *testing.T) {
			defer mvcc.SetNarrowRange(c.narrow)()
			testLogPagesByBytes(t)
		})
	}
}

func testLogPagesByBytes(t *testing.T) {
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		ctx := context.Background()
		txn := func(ops ...*pb.RequestOp) {
			t.Helper()
			if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
				t.Fatal(err)
			}
		}
		value := func(i, size int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("v", size) }
		start := s.Rev()
		put(t, s, "/o/x", []byte("outside"))
		// Values larger than what a page's first statement reads with its
		// row (inlineBytes, 64 KiB on SQLite) too.
		for i, size := range []int{0, 10, 300, 1000, 70 << 10, 5000, 40, 2500, 100 << 10} {
			// Several keys in one revision, one key alone, deletes of one
			// key and of several in one revision, recreates.
			txn(putOp([]byte("/p/b"), value(i, size), 0), putOp([]byte("/p/c"), value(i, size/2), 0), putOp([]byte("/p/d"), value(i, 7), 0))
			put(t, s, "/p/a", []byte(value(i, size)))
			put(t, s, "/q/x", []byte(value(i, size)))
			if i%3 == 1 {
				txn(delRangeOp("/p/a", ""))
				txn(delRangeOp("/p/b", "/p/e"))
				txn(putOp([]byte("/p/a"), "", 0))
			}
			put(t, s, "/p/a", []byte(value(i, size*2)))
		}
		to := s.Rev()
		for _, kr := range []mvcc.KeyRange{
			mvcc.NewKeyRange([]byte("/p/a"), nil),
			mvcc.NewKeyRange([]byte("/p/"), []byte("/p0")),
			mvcc.NewKeyRange([]byte("/p/"), []byte{0}),
		} {
			for _, from := range []int64{0, start + 12} {
				want, through, err := s.Events(ctx, max(from, start+1), to, kr)
				if err != nil || through != to {
					t.Fatalf("watch %s from %d: through %d, %v", kr.Key, from, through, err)
				}
				// Two entries fill the first page of exactly their size.
				exact := want[0].Size() + want[1].Size()
				for _, b := range []struct{ limit, maxBytes int }{{1000, 0}, {1000, 1}, {1000, 700}, {1000, 3000}, {1000, 300 << 10}, {1000, exact}, {3, 6000}, {1, 0}} {
					what := fmt.Sprintf("Log %q-%q from %d, limit %d, %d bytes", kr.Key, kr.End, from, b.limit, b.maxBytes)
					got := logPages(t, s, what, mvcc.LogQuery{Range: kr, FromRev: from, Limit: b.limit, MaxBytes: b.maxBytes})
					if len(got) != len(want) {
						t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
					}
					for i := range got {
						g, w := got[i], want[i]
						if g.Type != w.Type || g.UnixMs != w.UnixMs || !proto.Equal(g.Kv, w.Kv) || !proto.Equal(g.PrevKv, w.PrevKv) ||
							(g.PrevKv == nil) != (w.PrevKv == nil) {
							t.Fatalf("%s, entry %d:\n got %v kv %v prev %v\nwant %v kv %v prev %v", what, i, g.Type, g.Kv, g.PrevKv, w.Type, w.Kv, w.PrevKv)
						}
					}
				}
			}
		}
	})
}

// logPages reads every page of q, checking each against its bounds: at
// most Limit entries, at most MaxBytes (or one entry), and, when More,
// full: its limit reached, or the entry after it would not have fit.
func logPages(t *testing.T, s *mvcc.Store, what string, q mvcc.LogQuery) []*mvcc.Event {
	t.Helper()
	var all []*mvcc.Event
	var prevMore bool
	var prevSize, prevLen int
	for range 1000 {
		page, err := s.Log(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) == 0 {
			t.Fatalf("%s: an empty page after %v", what, q.After)
		}
		if prevMore && prevLen < q.Limit && q.MaxBytes > 0 && prevSize+page.Events[0].Size() <= q.MaxBytes {
			t.Fatalf("%s: a page of %d bytes ended before an entry of %d", what, prevSize, page.Events[0].Size())
		}
		size := pageBytes(page.Events)
		if len(page.Events) > q.Limit || (q.MaxBytes > 0 && len(page.Events) > 1 && size > q.MaxBytes) {
			t.Fatalf("%s: a page of %d entries, %d bytes", what, len(page.Events), size)
		}
		all = append(all, page.Events...)
		if !page.More {
			return all
		}
		if last := page.Events[len(page.Events)-1]; page.Next.Rev != last.Rev() {
			t.Fatalf("%s: next %v after an entry at revision %d", what, page.Next, last.Rev())
		}
		q.After = page.Next
		prevMore, prevSize, prevLen = page.More, size, len(page.Events)
	}
	t.Fatalf("%s: no last page", what)
	return nil
}
