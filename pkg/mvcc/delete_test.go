package mvcc_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func delRangeOp(key, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), RangeEnd: []byte(end), PrevKv: true}}}
}

// inOneBatch submits reqs so that the writer takes them as one batch: it
// is held at the start of the batch before them while they queue.
func inOneBatch(t *testing.T, s *mvcc.Store, reqs []*pb.TxnRequest) ([]*pb.TxnResponse, []error) {
	t.Helper()
	release, err := s.HoldWriter()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() { s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp([]byte("/head"), "h", 0)}}) })
	// The writer takes it, and waits for its connection.
	for deadline := time.Now().Add(30 * time.Second); !s.WriterInDB() || s.QueuedWrites() > 0; {
		if time.Now().After(deadline) {
			t.Fatal("30 s on, the writer has not taken the head request")
		}
		time.Sleep(time.Millisecond)
	}
	resps, errs := make([]*pb.TxnResponse, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		wg.Go(func() { resps[i], errs[i] = s.Txn(ctx, r) })
		for s.QueuedWrites() < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	batches, failures := batchCounts(t)
	release()
	wg.Wait()
	// The head's batch and one more: the database refused none (a refused
	// batch is retried request by request, which would hide a bug).
	if b, f := batchCounts(t); b != batches+2 || f != failures {
		t.Fatalf("%v batches and %v failures for the head and the batch, want 2 and 0", b-batches, f-failures)
	}
	return resps, errs
}

// batchCounts is how many batches the writers have committed or tried, and
// how many the database refused.
func batchCounts(t *testing.T) (batches uint64, failures float64) {
	t.Helper()
	var size, failed dto.Metric
	if err := metrics.WriteBatchSize.Write(&size); err != nil {
		t.Fatal(err)
	}
	if err := metrics.CommitFailures.Write(&failed); err != nil {
		t.Fatal(err)
	}
	return size.GetHistogram().GetSampleCount(), failed.GetCounter().GetValue()
}

// A range delete sees the writes of the requests before it in its batch
// (a key created, a key updated, a key deleted), deletes in one revision
// with prev_kv, and leaves the same answers, state, events and log as the
// SQL path taking the requests one at a time.
func TestDeleteRangeInBatch(t *testing.T) {
	setup := []string{"/d/a1", "/d/a2", "/d/a3", "/d/b1", "/d/z"}
	batch := []*pb.TxnRequest{
		{Success: []*pb.RequestOp{putOp([]byte("/d/a15"), "new", 0)}},
		{Success: []*pb.RequestOp{putOp([]byte("/d/a2"), "updated", 0)}},
		{Success: []*pb.RequestOp{delRangeOp("/d/a3", "")}},
		{Success: []*pb.RequestOp{delRangeOp("/d/a", "/d/b")}},
		{Success: []*pb.RequestOp{putOp([]byte("/d/a1"), "again", 0)}},
		{Success: []*pb.RequestOp{delRangeOp("/d/", "/d0")}},
		{
			Compare: []*pb.Compare{{Key: []byte("/d/a2"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 0}}},
			Success: []*pb.RequestOp{putOp([]byte("/d/c"), "after", 0)},
		},
		{Success: []*pb.RequestOp{delRangeOp("/d/", "/d0")}},
	}
	matchesOneAtATime(t, setup, batch, func(t *testing.T, want []*pb.TxnResponse) {
		if got := want[3].Responses[0].GetResponseDeleteRange(); got.Deleted != 3 || string(got.PrevKvs[1].Key) != "/d/a15" || string(got.PrevKvs[2].Value) != "updated" {
			t.Fatalf("reference delete of [/d/a, /d/b): %v", got)
		}
	})
}

// A range delete of GoneMin keys or more records its range instead of each
// key (delete_sqlite.go): the requests after it in its batch still find
// every key in it deleted, those the batch created before it too, and
// find again those they create; with two such ranges, one unbounded.
func TestLargeDeleteRangeInBatch(t *testing.T) {
	n := mvcc.GoneMin + 44
	setup := []string{"/g/z"}
	for i := range n {
		setup = append(setup, fmt.Sprintf("/g/k%03d", i), fmt.Sprintf("/h/k%03d", i))
	}
	compareAbsent := func(key, put string) *pb.TxnRequest {
		return &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte(key), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 0}}},
			Success: []*pb.RequestOp{putOp([]byte(put), "after "+key, 0)},
		}
	}
	batch := []*pb.TxnRequest{
		{Success: []*pb.RequestOp{putOp([]byte("/g/k0105"), "new", 0)}},
		{Success: []*pb.RequestOp{putOp([]byte("/g/k100"), "updated", 0)}},
		{Success: []*pb.RequestOp{delRangeOp("/g/k", "/g/l")}}, // n+1 keys
		{Success: []*pb.RequestOp{putOp([]byte("/g/k150"), "again", 0)}},
		compareAbsent("/g/k200", "/g/c"),
		{Success: []*pb.RequestOp{delRangeOp("/g/", "/g0")}}, // /g/c, /g/k150, /g/z
		{Success: []*pb.RequestOp{putOp([]byte("/g/k050"), "third", 0)}},
		compareAbsent("/g/k150", "/g/d"),
		{Success: []*pb.RequestOp{delRangeOp("/h/", "\x00")}}, // n keys and /head
		{Success: []*pb.RequestOp{delRangeOp("/h/k007", "")}}, // one key, gone
		{Success: []*pb.RequestOp{putOp([]byte("/h/k010"), "again", 0)}},
		compareAbsent("/head", "/i/x"),
		{Success: []*pb.RequestOp{delRangeOp("/h/k", "/h/l")}}, // /h/k010
	}
	matchesOneAtATime(t, setup, batch, func(t *testing.T, want []*pb.TxnResponse) {
		for i, deleted := range map[int]int{2: n + 1, 5: 3, 8: n + 1, 9: 0, 12: 1} {
			if got := want[i].Responses[0].GetResponseDeleteRange().Deleted; got != int64(deleted) {
				t.Fatalf("reference request %d deleted %d keys, want %d", i, got, deleted)
			}
		}
		for _, i := range []int{4, 7, 11} {
			if !want[i].Succeeded {
				t.Fatalf("reference request %d: the compare on a deleted key's version failed", i)
			}
		}
	})
}

// matchesOneAtATime puts setup's keys into three stores, runs batch's
// requests one at a time on the one without a live index (the SQL path),
// checks its answers with checkRef, then runs them as one batch on the two
// with one, and compares their answers, events and ranges with it.
func matchesOneAtATime(t *testing.T, setup []string, batch []*pb.TxnRequest, checkRef func(*testing.T, []*pb.TxnResponse)) {
	t.Helper()
	// A ring of one byte holds no event: watchers read the log, which so is
	// compared too.
	ref := openStore(t, mvcc.Options{DisableLiveIndex: true, RingBytes: 1})
	stores := map[string]*mvcc.Store{
		"index, events from the log":  openStore(t, mvcc.Options{RingBytes: 1}),
		"index, events from the ring": openStore(t, mvcc.Options{}),
	}
	ctx := context.Background()
	for _, s := range []*mvcc.Store{ref, stores["index, events from the log"], stores["index, events from the ring"]} {
		for _, k := range setup {
			put(t, s, k, []byte("v-"+k))
		}
	}
	start := ref.Rev()
	put(t, ref, "/head", []byte("h"))
	var want []*pb.TxnResponse
	for _, r := range batch {
		resp, err := ref.Txn(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, resp)
	}
	checkRef(t, want)
	all := mvcc.NewKeyRange([]byte("/"), []byte{0})
	wantEvents, _, err := ref.Events(ctx, start+1, ref.Rev(), all)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			if !s.IndexServing() {
				t.Fatal("the live index does not serve")
			}
			resps, errs := inOneBatch(t, s, batch)
			for i := range batch {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				if !proto.Equal(resps[i], want[i]) {
					t.Fatalf("request %d:\n got %v\nwant %v", i, resps[i], want[i])
				}
			}
			evs, _, err := s.Events(ctx, start+1, s.Rev(), all)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != len(wantEvents) {
				t.Fatalf("%d events, want %d", len(evs), len(wantEvents))
			}
			for i, e := range evs {
				w := wantEvents[i]
				if e.Type != w.Type || !proto.Equal(e.Kv, w.Kv) || !proto.Equal(e.PrevKv, w.PrevKv) {
					t.Fatalf("event %d: %v %v (prev %v), want %v %v (prev %v)", i, e.Type, e.Kv, e.PrevKv, w.Type, w.Kv, w.PrevKv)
				}
			}
			for _, r := range []*pb.RangeRequest{{Key: []byte("/"), RangeEnd: []byte{0}}, {Key: []byte("/d/"), RangeEnd: []byte("/d0"), CountOnly: true}, {Key: []byte("/g/"), RangeEnd: []byte("/g0"), CountOnly: true}, {Key: []byte("/h/"), RangeEnd: []byte{0}, CountOnly: true}} {
				a, errA := s.Range(ctx, r)
				b, errB := ref.Range(ctx, r)
				if errA != nil || errB != nil || a.Rev != b.Rev || a.Count != b.Count || len(a.Kvs) != len(b.Kvs) {
					t.Fatalf("range %v: errors %v, %v; rev %d, count %d; want rev %d, count %d", r, errA, errB, a.Rev, a.Count, b.Rev, b.Count)
				}
				for i := range a.Kvs {
					if !proto.Equal(a.Kvs[i], b.Kvs[i]) {
						t.Fatalf("range %v: kv %d: %v, want %v", r, i, a.Kvs[i], b.Kvs[i])
					}
				}
			}
		})
	}
}

// A range delete of more keys than one step of statements removes is still
// one revision, its events and log rows in key order.
func TestDeleteRangeSteps(t *testing.T) {
	const keys = 4500
	ctx := context.Background()
	ref := openStore(t, mvcc.Options{DisableLiveIndex: true, RingBytes: 1})
	s := openStore(t, mvcc.Options{RingBytes: 1})
	var want *pb.TxnResponse
	for _, st := range []*mvcc.Store{ref, s} {
		put(t, st, "/e/", []byte("before"))
		for i := 0; i < keys; i += 100 {
			var ops []*pb.RequestOp
			for j := i; j < i+100; j++ {
				ops = append(ops, putOp(fmt.Appendf(nil, "/e/k%05d", j), fmt.Sprint(j), 0))
			}
			if _, err := st.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
				t.Fatal(err)
			}
		}
		put(t, st, "/e0", []byte("after"))
		// The stepped delete runs wherever the live index does.
		if st.IndexServing() != (st == s) {
			t.Fatalf("live index serving: %v", st.IndexServing())
		}
		resp, err := st.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp("/e/k", "/e/l")}})
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = resp
			continue
		}
		if !proto.Equal(resp, want) {
			t.Fatalf("delete answered %d deleted at %d, want %d at %d", resp.Responses[0].GetResponseDeleteRange().Deleted, resp.Header.Revision,
				want.Responses[0].GetResponseDeleteRange().Deleted, want.Header.Revision)
		}
	}
	if d := want.Responses[0].GetResponseDeleteRange(); d.Deleted != keys {
		t.Fatalf("deleted %d, want %d", d.Deleted, keys)
	}
	rev := want.Header.Revision
	evs, _, err := s.Events(ctx, rev, rev, mvcc.NewKeyRange([]byte("/"), []byte{0}))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != keys {
		t.Fatalf("%d events at revision %d, want %d", len(evs), rev, keys)
	}
	for i, e := range evs {
		if k := fmt.Sprintf("/e/k%05d", i); e.Type != mvccpb.DELETE || string(e.Kv.Key) != k || e.PrevKv == nil || string(e.PrevKv.Value) != fmt.Sprint(i) {
			t.Fatalf("event %d: %v %q (prev %v), want the delete of %s", i, e.Type, e.Kv.Key, e.PrevKv, k)
		}
	}
	for _, k := range []string{"/e/", "/e0"} {
		r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(k)})
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("%s outside the range: %v, %d kvs", k, err, len(r.Kvs))
		}
	}
}

// A live index found out of step with the table during a range delete (a
// row gone behind the store's back) fails that batch and is reloaded, so
// the next request deletes what the table holds, instead of every range
// delete failing from then on.
func TestDeleteRangeHealsAStaleIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	d, err := sqlite.New("sqlite://"+path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"/m/a", "/m/b", "/m/c"} {
		put(t, s, k, []byte("v"))
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `DELETE FROM current WHERE key = ?`, []byte("/m/b")); err != nil {
		t.Fatal(err)
	}
	del := &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp("/m/", "/m0")}}
	if _, err := s.Txn(ctx, del); err == nil || !strings.Contains(err.Error(), "where the live index has 3") {
		t.Fatalf("a range delete over a stale index: %v", err)
	}
	resp, err := s.Txn(ctx, del)
	if err != nil {
		t.Fatalf("the range delete after the index was found stale: %v", err)
	}
	if n := resp.Responses[0].GetResponseDeleteRange().Deleted; n != 2 {
		t.Errorf("deleted %d keys, want the table's 2", n)
	}
	if !s.IndexServing() {
		t.Error("the reloaded live index is not serving")
	}
}

// A range delete whose log insert fails partway through a step (here a
// row already at one of its (rev, sub)) leaves nothing behind: the step's
// statement keeps no journal of its own (OR FAIL), so this rests on the
// whole batch being rolled back. Every key stays live, no row of the
// failed revision is left, and the same delete succeeds once the
// obstacle is gone.
func TestDeleteRangeFailingMidwayLeavesNothing(t *testing.T) {
	const keys = 10
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openAt(t, "sqlite://"+path, mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	var ops []*pb.RequestOp
	for i := range keys {
		ops = append(ops, putOp(fmt.Appendf(nil, "/m/k%02d", i), fmt.Sprint(i), 0))
	}
	rev := txn(t, s, ops...)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The put's rows are numbered as the delete's will be: in key order
	// from the revision's first sub.
	var firstSub int64
	if err := db.QueryRowContext(ctx, `SELECT MIN(sub) FROM log WHERE rev = ?`, rev).Scan(&firstSub); err != nil {
		t.Fatal(err)
	}
	block := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, rev+1, firstSub+keys/2); err != nil {
			t.Fatal(err)
		}
	}
	block(`INSERT INTO log (rev, sub, key, value, create_rev, version, lease, deleted, unix_ms) VALUES (?, ?, '/zz', NULL, 0, 0, 0, 1, 0)`)

	// The statements of a range delete run where the live index serves;
	// without it the keys are deleted one at a time.
	if !s.IndexServing() {
		t.Fatal("the live index is not serving")
	}
	del := &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp("/m/", "/m0")}}
	if _, err := s.Txn(ctx, del); err == nil || !strings.Contains(err.Error(), "UNIQUE constraint failed") {
		t.Fatalf("a range delete over a taken (rev, sub): %v", err)
	}
	if s.Rev() != rev {
		t.Fatalf("revision %d after the failed delete, want %d", s.Rev(), rev)
	}
	var logRows, live int64
	if err := db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM log WHERE rev = ?), (SELECT COUNT(*) FROM current WHERE key >= ? AND key < ?)`, rev+1, []byte("/m/"), []byte("/m0")).Scan(&logRows, &live); err != nil {
		t.Fatal(err)
	}
	if logRows != 1 || live != keys {
		t.Fatalf("after the failed delete: %d log rows at its revision (want the obstacle alone), %d live rows (want %d)", logRows, live, keys)
	}
	r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/m/"), RangeEnd: []byte("/m0"), CountOnly: true})
	if err != nil || r.Count != keys {
		t.Fatalf("live keys after the failed delete: %v, %v", r, err)
	}

	block(`DELETE FROM log WHERE rev = ? AND sub = ?`)
	resp, err := s.Txn(ctx, del)
	if err != nil || resp.Responses[0].GetResponseDeleteRange().Deleted != keys || resp.Header.Revision != rev+1 {
		t.Fatalf("the delete again: %v, %v", resp, err)
	}
	evs, _, err := s.Events(ctx, rev+1, rev+1, mvcc.NewKeyRange([]byte("/m/"), []byte("/m0")))
	if err != nil || len(evs) != keys {
		t.Fatalf("events of the delete: %d, %v", len(evs), err)
	}
}
