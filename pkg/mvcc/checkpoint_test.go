package mvcc_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// checkpoints is the SQLite dialect with its Checkpointer calls recorded;
// each background checkpoint waits for a value on gate before it runs.
type checkpoints struct {
	*sqlite.Dialect
	gate    chan struct{}
	started chan struct{}
	mu      sync.Mutex
	calls   []string
}

func (c *checkpoints) record(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call)
}

func (c *checkpoints) seen() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.calls, " ")
}

func (c *checkpoints) AutoCheckpoint(ctx context.Context, ex mvcc.Execer, on bool) error {
	c.record(map[bool]string{true: "on", false: "off"}[on])
	return c.Dialect.AutoCheckpoint(ctx, ex, on)
}

func (c *checkpoints) Checkpoint(ctx context.Context, db *sql.DB) error {
	c.started <- struct{}{}
	select {
	case <-c.gate:
	case <-ctx.Done():
		c.record("canceled")
		return ctx.Err()
	}
	err := c.Dialect.Checkpoint(ctx, db)
	c.record("checkpoint")
	return err
}

// openCheckpoints opens a store on SQLite with its Checkpointer calls
// recorded (started holds up to `started` checkpoints' starts), on a clock
// that stands still unless opts gives one: then no ordinary commit starts
// a checkpoint of its own (TestCommitsCheckpointBehind).
func openCheckpoints(t *testing.T, started int, opts mvcc.Options) (*mvcc.Store, *checkpoints) {
	t.Helper()
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "c.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &checkpoints{Dialect: d, gate: make(chan struct{}), started: make(chan struct{}, started)}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = (&fakeClock{now: time.Unix(1_000_000, 0)}).Now
	}
	s, err := mvcc.Open(context.Background(), c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

// bulkKeys 1 KiB values make over 16 MiB of rows: deleting them is a
// bulk batch.
const bulkKeys = 17 << 10

// loadValues puts keys 1 KiB values under prefix, 128 to a Txn.
func loadValues(t *testing.T, s *mvcc.Store, prefix string, keys int) {
	t.Helper()
	value := bytes.Repeat([]byte("v"), 1024)
	for i := 0; i < keys; i += 128 {
		var ops []*pb.RequestOp
		for j := i; j < min(i+128, keys); j++ {
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "%s%06d", prefix, j), Value: value}}})
		}
		if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: ops}); err != nil {
			t.Fatal(err)
		}
	}
}

// A DeleteRange of many rows commits without the writer's connection
// copying the WAL into the database: a checkpoint on a reader's connection
// does it behind the answer, and the writer's connection checkpoints again
// once it is done. A large delete committed while one runs gets one of its
// own after it; a small delete changes nothing.
func TestLargeDeleteCheckpointsBehind(t *testing.T) {
	s, c := openCheckpoints(t, 2, mvcc.Options{})
	ctx := context.Background()
	load := func(prefix string, keys int) { loadValues(t, s, prefix, keys) }
	del := func(key, end string, want int64) {
		t.Helper()
		resp, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp(key, end)}})
		if err != nil {
			t.Fatal(err)
		}
		if n := resp.Responses[0].GetResponseDeleteRange().Deleted; n != want {
			t.Fatalf("deleted %d keys under %s, want %d", n, key, want)
		}
	}
	write := func() {
		t.Helper()
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/other"), "x", 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(calls string) {
		t.Helper()
		if got := c.seen(); got != calls {
			t.Fatalf("checkpoint calls %q, want %q", got, calls)
		}
	}
	// until writes until cond holds: the writer looks at the background
	// checkpoint when a batch starts, and it ends a little after its
	// call does.
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); write() {
			if time.Now().After(deadline) {
				t.Fatalf("a minute on, %s (checkpoint calls %q)", what, c.seen())
			}
			time.Sleep(time.Millisecond)
		}
	}
	started := func() bool {
		select {
		case <-c.started:
			return true
		default:
			return false
		}
	}
	load("/small/", 10)
	del("/small/000000", "/small/000010", 10)
	write()
	want("")

	load("/a/", bulkKeys)
	load("/b/", bulkKeys)
	del("/a/", "/a0", bulkKeys)
	until("no background checkpoint started", started)
	want("off")
	// It still runs: the writer's connection does not checkpoint yet.
	write()
	want("off")
	del("/b/", "/b0", bulkKeys)
	c.gate <- struct{}{}
	// The writer finds it done at a batch's start and starts another for
	// the delete that committed meanwhile.
	until("no second background checkpoint started", started)
	want("off checkpoint")
	c.gate <- struct{}{}
	until("the writer's connection does not checkpoint again", func() bool { return strings.HasSuffix(c.seen(), " on") })
	want("off checkpoint checkpoint on")
	write()
	want("off checkpoint checkpoint on")
}

// A large delete committed while a periodic checkpoint runs gets its own
// background checkpoint after that one ends, not beside it: SQLite would
// answer it "busy" at once, and the writer's connection would copy the
// delete's whole log inside a later commit.
func TestLargeDeleteWaitsForThePeriodicCheckpoint(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	s, c := openCheckpoints(t, 2, mvcc.Options{Now: clock.Now})
	ctx := context.Background()
	write := func() {
		t.Helper()
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/other"), "x", 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	started := func(wait time.Duration) bool {
		select {
		case <-c.started:
			return true
		case <-time.After(wait):
			return false
		}
	}
	loadValues(t, s, "/a/", bulkKeys)
	clock.Advance(50 * time.Millisecond)
	write()
	if !started(time.Minute) {
		t.Fatalf("no periodic checkpoint started (calls %q)", c.seen())
	}
	// The periodic checkpoint is held at the gate while the delete commits.
	resp, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp("/a/", "/a0")}})
	if err != nil {
		t.Fatal(err)
	}
	if n := resp.Responses[0].GetResponseDeleteRange().Deleted; n != bulkKeys {
		t.Fatalf("deleted %d keys, want %d", n, bulkKeys)
	}
	if started(100 * time.Millisecond) {
		t.Fatalf("the delete's checkpoint started beside the periodic one (calls %q)", c.seen())
	}
	c.gate <- struct{}{}
	if !started(time.Minute) {
		t.Fatalf("the delete's checkpoint did not start after the periodic one (calls %q)", c.seen())
	}
	c.gate <- struct{}{}
	for deadline := time.Now().Add(time.Minute); !strings.HasSuffix(c.seen(), " on"); write() {
		if time.Now().After(deadline) {
			t.Fatalf("a minute on, the writer's connection does not checkpoint again (calls %q)", c.seen())
		}
		time.Sleep(time.Millisecond)
	}
	if got, want := c.seen(), "off checkpoint checkpoint on"; got != want {
		t.Fatalf("checkpoint calls %q, want %q", got, want)
	}
}

// Ordinary commits leave most of the WAL to a background checkpoint: a
// commit starts one when checkpointEvery has passed since the last one
// started and 32 changes have committed since (or a second has passed),
// and never while one runs. The writer's connection never turns its own
// checkpoint off for them.
func TestCommitsCheckpointBehind(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	s, c := openCheckpoints(t, 1, mvcc.Options{Now: clock.Now})
	write := func() {
		t.Helper()
		if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/k"), "v", 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The checkpoint starts in a goroutine after the commit: wait for it.
	started := func(want bool) {
		t.Helper()
		wait := time.Minute
		if !want {
			// Nothing to wait for: a checkpoint that should not start
			// has had this long to show itself.
			wait = 100 * time.Millisecond
		}
		select {
		case <-c.started:
			if !want {
				t.Fatalf("a background checkpoint started (calls %q)", c.seen())
			}
		case <-time.After(wait):
			if want {
				t.Fatalf("no background checkpoint started (calls %q)", c.seen())
			}
		}
	}
	write()
	clock.Advance(999 * time.Millisecond)
	write()
	started(false)
	clock.Advance(time.Millisecond)
	write()
	started(true)
	// It runs (held at the gate): later commits start none.
	clock.Advance(time.Second)
	write()
	write()
	started(false)
	c.gate <- struct{}{}
	// Once it has ended, the next commit starts another. It ends a
	// little after its call returns, so write until one starts.
	for deadline := time.Now().Add(time.Minute); ; {
		write()
		select {
		case <-c.started:
		case <-time.After(time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("a minute on, no second background checkpoint (calls %q)", c.seen())
			}
			continue
		}
		break
	}
	c.gate <- struct{}{}
	if got := c.seen(); got != "checkpoint" && got != "checkpoint checkpoint" {
		t.Fatalf("checkpoint calls %q, want only background checkpoints", got)
	}
}

// At a low rate a background checkpoint waits for 32 changes to copy, or
// for a second to pass, however long its interval (ADR-033): each one
// syncs the database file, which at one per commit doubled the syncs.
func TestCheckpointWaitsForChanges(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	s, c := openCheckpoints(t, 1, mvcc.Options{Now: clock.Now})
	write := func() {
		t.Helper()
		if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/k"), "v", 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	none := func(after string) {
		t.Helper()
		select {
		case <-c.started:
			t.Fatalf("a background checkpoint started %s (calls %q)", after, c.seen())
		case <-time.After(50 * time.Millisecond):
		}
	}
	one := func(after string) {
		t.Helper()
		select {
		case <-c.started:
		case <-time.After(time.Minute):
			t.Fatalf("no background checkpoint started %s (calls %q)", after, c.seen())
		}
		c.gate <- struct{}{}
	}
	// 50 updates a second: 20 ms apart, each past checkpointEvery.
	for range 31 {
		clock.Advance(20 * time.Millisecond)
		write()
	}
	none("after 31 changes in 620 ms")
	clock.Advance(20 * time.Millisecond)
	write()
	one("after 32 changes")
	// Fewer changes, but a second on.
	for range 4 {
		clock.Advance(240 * time.Millisecond)
		write()
	}
	none("after 4 changes in 960 ms")
	clock.Advance(40 * time.Millisecond)
	write()
	one("a second after the last")
}

// The interval between background checkpoints follows the batch that
// just committed: 2 ms per key it changed, at least 20 ms and at most
// 50 ms (ADR-015). It is counted from the store's start, then from the
// last checkpoint's start, and the committing batch's size decides it
// whatever the batches before were. A batch that changed no key starts
// none.
func TestCheckpointIntervalFollowsTheBatch(t *testing.T) {
	for _, tc := range []struct{ first, then int }{{1, 1}, {7, 7}, {12, 12}, {25, 25}, {100, 1}, {1, 100}} {
		t.Run(fmt.Sprint(tc.first, "-", tc.then), func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1_000_000, 0)}
			s, c := openCheckpoints(t, 1, mvcc.Options{Now: clock.Now})
			n := 0
			write := func(changes int) {
				t.Helper()
				req := &pb.TxnRequest{}
				for range changes {
					n++
					req.Success = append(req.Success, putOp(fmt.Appendf(nil, "/k/%d", n), "v", 0))
				}
				if changes == 0 {
					// A compare that fails, and a read instead.
					req.Compare = []*pb.Compare{{Key: []byte("/none"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{}}}
					req.Failure = []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("/none")}}}}
				}
				if _, err := s.Txn(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			every := func(changes int) time.Duration {
				return min(max(time.Duration(changes)*2*time.Millisecond, 20*time.Millisecond), 50*time.Millisecond)
			}
			// phase commits batches of size changes for a while with the
			// clock a millisecond short of their interval, and none may
			// start a checkpoint (the one before, if any, ends meanwhile);
			// then, a millisecond on, they start one.
			phase := func(changes int) {
				t.Helper()
				clock.Advance(every(changes) - time.Millisecond)
				// Enough changes for a checkpoint (32), so that the
				// interval alone holds it back.
				for end, written := time.Now().Add(200*time.Millisecond), 0; time.Now().Before(end) || written < 32; written += changes {
					write(changes)
					select {
					case <-c.started:
						t.Fatalf("a background checkpoint started %v after the last, after batches of %d changes", every(changes)-time.Millisecond, changes)
					default:
					}
				}
				clock.Advance(time.Millisecond)
				write(0)
				select {
				case <-c.started:
					t.Fatal("a batch that changed no key started a background checkpoint")
				case <-time.After(100 * time.Millisecond):
				}
				write(changes)
				select {
				case <-c.started:
				case <-time.After(time.Minute):
					t.Fatalf("no background checkpoint started %v after the last, after a batch of %d changes (calls %q)", every(changes), changes, c.seen())
				}
				c.gate <- struct{}{}
			}
			phase(tc.first)
			phase(tc.then)
		})
	}
}

// With background checkpoints after ordinary commits, the WAL still
// starts over: under a steady stream of writes its file stays near the
// writer's checkpoint threshold (1,000 pages) instead of growing with
// every page written, as it did when only background checkpoints copied
// it (docs/benchmarks/first-figures-and-live-index.md, "Tried and not
// kept").
func TestCommitsKeepTheWALSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.db")
	d, err := sqlite.New("sqlite://"+path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Every read of the clock moves it on, so that commits start
	// background checkpoints as often as they may.
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	now := func() time.Time {
		clock.Advance(10 * time.Millisecond)
		return clock.Now()
	}
	s, err := mvcc.Open(context.Background(), d, mvcc.Options{Logger: slog.New(slog.DiscardHandler), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	value := strings.Repeat("v", 1024)
	// 3,000 puts from 4 writers, their commits racing the background
	// checkpoints: about 14,500 pages of WAL when nothing lets the WAL
	// start over.
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := range 4 {
		wg.Go(func() {
			for i := range 750 {
				key := fmt.Appendf(nil, "/w/%d/%04d", g, i%200)
				if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{putOp(key, value, 0)}}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 pages of 4 KiB with their frame headers, and the batch that
	// crossed them.
	if limit := int64(1500 * (4096 + 24)); st.Size() > limit {
		t.Fatalf("WAL is %d bytes after 3,000 puts: over %d, so it did not start over", st.Size(), limit)
	}
}

// putBig writes over 64 MiB of values under /big/, each put far less.
func putBig(t *testing.T, s *mvcc.Store) {
	t.Helper()
	value := string(bytes.Repeat([]byte("v"), 1400<<10))
	for i := range 50 {
		if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{putOp(fmt.Appendf(nil, "/big/%02d", i), value, 0)}}); err != nil {
			t.Fatal(err)
		}
	}
}

func deleteBig(t *testing.T, s *mvcc.Store) {
	t.Helper()
	if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp("/big/", "/big0")}}); err != nil {
		t.Fatal(err)
	}
}

// The memory a big DeleteRange frees goes back to the operating system
// once its events leave the Hub, not before (watchers read them there)
// and not for ordinary writes.
func TestLargeDeleteReleasesMemory(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	s := openStore(t, mvcc.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	var released atomic.Int64
	s.OnReleaseMemory(func() { released.Add(1) })
	putBig(t, s)
	write := func() {
		t.Helper()
		if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/other"), "x", 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	deleteBig(t, s)
	write()
	if n := released.Load(); n != 0 {
		t.Fatalf("memory released %d times while the Hub holds the delete's events", n)
	}
	clock.Advance(time.Minute)
	write()
	for deadline := time.Now().Add(time.Minute); released.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a minute after the delete's events left the Hub, no memory was released")
		}
	}
	write()
	if n := released.Load(); n != 1 {
		t.Fatalf("memory released %d times, want once", n)
	}
}

// A store that goes quiet after a big DeleteRange still hands the memory
// back: the delete's events leave the Hub when their hold ends, with no
// write after them, and the memory goes back twice.
func TestLargeDeleteReleasesMemoryWithNoWriteAfterIt(t *testing.T) {
	s := openStore(t, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	released := make(chan struct{}, 1)
	s.OnReleaseMemory(func() { released <- struct{}{} })
	putBig(t, s)
	deleteBig(t, s)
	select {
	case <-released:
	case <-time.After(30 * time.Second):
		t.Fatal("30 s after the delete, with nothing written since, no memory was released")
	}
	// Again later, for what watchers still sending the events held.
	select {
	case <-released:
	case <-time.After(30 * time.Second):
		t.Fatal("the memory was released once, not a second time")
	}
}

// Close does not leave a background checkpoint behind on the pool it
// closes: it cancels the checkpoint, waits for it, and logs no failure
// for it.
func TestCloseEndsTheBackgroundCheckpoint(t *testing.T) {
	var warnings atomic.Int64
	s, c := openCheckpoints(t, 1, mvcc.Options{Logger: slog.New(countingHandler{n: &warnings, level: slog.LevelWarn})})
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 64<<10)
	// Over 16 MiB of rows: the delete checkpoints behind its answer.
	for i := range 300 {
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(fmt.Appendf(nil, "/a/%03d", i), string(value), 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp("/a/", "/a0")}}); err != nil {
		t.Fatal(err)
	}
	<-c.started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := c.seen(), "off canceled"; got != want {
		t.Fatalf("after Close, checkpoint calls %q, want %q", got, want)
	}
	if n := warnings.Load(); n != 0 {
		t.Fatalf("%d warnings logged for a checkpoint Close ended", n)
	}
}

// countingHandler counts the records at level or above.
type countingHandler struct {
	n     *atomic.Int64
	level slog.Level
}

func (h countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }
