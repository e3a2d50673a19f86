package mvcc_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
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

// A DeleteRange of many rows commits without the writer's connection
// copying the WAL into the database: a checkpoint on a reader's connection
// does it behind the answer, and the writer's connection checkpoints again
// once it is done. A large delete committed while one runs gets one of its
// own after it; a small delete changes nothing.
func TestLargeDeleteCheckpointsBehind(t *testing.T) {
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "c.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &checkpoints{Dialect: d, gate: make(chan struct{}), started: make(chan struct{}, 2)}
	s, err := mvcc.Open(context.Background(), c, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 1024)
	// Over 16 MiB of rows under each prefix.
	const keys = 17 << 10
	load := func(prefix string, keys int) {
		for i := 0; i < keys; i += 128 {
			var ops []*pb.RequestOp
			for j := i; j < min(i+128, keys); j++ {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "%s%06d", prefix, j), Value: value}}})
			}
			if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
				t.Fatal(err)
			}
		}
	}
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

	load("/a/", keys)
	load("/b/", keys)
	del("/a/", "/a0", keys)
	until("no background checkpoint started", started)
	want("off")
	// It still runs: the writer's connection does not checkpoint yet.
	write()
	want("off")
	del("/b/", "/b0", keys)
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

// The memory a big DeleteRange frees goes back to the operating system
// once its events leave the Hub, not before (watchers read them there)
// and not for ordinary writes.
func TestLargeDeleteReleasesMemory(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "m.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(context.Background(), d, mvcc.Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var released atomic.Int64
	s.OnReleaseMemory(func() { released.Add(1) })
	ctx := context.Background()
	// Over 64 MiB in all, each put far less.
	value := bytes.Repeat([]byte("v"), 1400<<10)
	for i := range 50 {
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(fmt.Appendf(nil, "/big/%02d", i), string(value), 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	write := func() {
		t.Helper()
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/other"), "x", 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp("/big/", "/big0")}}); err != nil {
		t.Fatal(err)
	}
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

// Close does not leave a background checkpoint behind on the pool it
// closes: it cancels the checkpoint, waits for it, and logs no failure
// for it.
func TestCloseEndsTheBackgroundCheckpoint(t *testing.T) {
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "c.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &checkpoints{Dialect: d, gate: make(chan struct{}), started: make(chan struct{}, 1)}
	var warnings atomic.Int64
	logger := slog.New(countingHandler{n: &warnings, level: slog.LevelWarn})
	s, err := mvcc.Open(context.Background(), c, mvcc.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
