package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

func TestMain(m *testing.M) { framework.Main(m) }

// openStore opens a store on a fresh database; without PostgreSQL the
// test is skipped, or fails under CI=true.
func openStore(t *testing.T) (*mvcc.Store, string) {
	t.Helper()
	return openStoreVia(t, func(dsn string) string { return dsn })
}

// openStoreVia is openStore reaching the database at via(its DSN); the
// DSN returned is the direct one.
func openStoreVia(t *testing.T, via func(dsn string) string) (*mvcc.Store, string) {
	t.Helper()
	srv, err := framework.PostgresServer()
	if err != nil {
		framework.Unavailable(t, "PostgreSQL", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := pgtest.CreateDatabase(ctx, srv.AdminDSN, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	d, err := postgres.New(via(dsn), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dsn
}

func putOp(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func rangeOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func delOp(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

// The writer holds a batch's writes back and sends them in one statement:
// a range or delete inside the batch must still see the writes before it.
func TestBatchReadsItsOwnWrites(t *testing.T) {
	s, dsn := openStore(t)
	ctx := context.Background()
	resp, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("a/1", "x"), putOp("a/2", "y"), rangeOp("a/", "a0")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Responses[2].GetResponseRange(); got.Count != 2 || len(got.Kvs) != 2 {
		t.Fatalf("range after puts in one txn: count %d, %d kvs; want 2", got.Count, len(got.Kvs))
	}
	resp, err = s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delOp("a/", "a0"), putOp("b", "z"), rangeOp("a/", "a0")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Responses[0].GetResponseDeleteRange(); got.Deleted != 2 {
		t.Fatalf("deleted %d, want 2", got.Deleted)
	}
	if got := resp.Responses[2].GetResponseRange(); got.Count != 0 {
		t.Fatalf("range after delete in one txn: count %d, want 0", got.Count)
	}
	checkTables(t, dsn)
}

// A batch larger than one statement should carry is sent in parts, and
// the parts agree with the rest of the batch.
func TestLargeBatchGoesInParts(t *testing.T) {
	s, dsn := openStore(t)
	big := string(bytes.Repeat([]byte("v"), 12<<20))
	ctx := context.Background()
	if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("big/1", big), putOp("big/2", big)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("big/1", "small"), putOp("big/3", big), putOp("big/4", big), delOp("big/2", ""), rangeOp("big/", "big0")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Responses[4].GetResponseRange(); got.Count != 3 {
		t.Fatalf("range: count %d, want 3", got.Count)
	}
	checkTables(t, dsn)
}

// Many clients at once (so batches hold many requests, several on one
// key): the log and current agree, revisions have no holes, and every
// acknowledged write is there.
func TestConcurrentBatches(t *testing.T) {
	s, dsn := openStore(t)
	const clients, perClient, keys = 32, 40, 16
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range perClient {
				k := fmt.Sprintf("k/%d", (c*perClient+i)%keys)
				var ops []*pb.RequestOp
				switch i % 4 {
				case 3:
					ops = []*pb.RequestOp{delOp(k, "")}
				default:
					ops = []*pb.RequestOp{putOp(k, fmt.Sprintf("%d-%d", c, i))}
				}
				cmp := []*pb.Compare{{Key: []byte(k), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER,
					TargetUnion: &pb.Compare_Version{Version: -1}}}
				if _, err := s.Txn(ctx, &pb.TxnRequest{Compare: cmp, Success: ops}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkTables(t, dsn)
}

// checkTables replays the log and compares it with current and meta.
func checkTables(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var metaRev, maxRev, distinct int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT value FROM meta WHERE name = 'rev'), max(rev), count(DISTINCT rev) FROM log`).Scan(&metaRev, &maxRev, &distinct); err != nil {
		t.Fatal(err)
	}
	if maxRev != metaRev || distinct != metaRev-1 {
		t.Errorf("meta.rev %d, log revisions up to %d, %d distinct: want contiguous 2..meta.rev", metaRev, maxRev, distinct)
	}
	type cur struct {
		value                       []byte
		create, mod, version, lease int64
	}
	want := map[string]cur{}
	rows, err := conn.Query(ctx, `SELECT key, value, create_rev, rev, version, lease, deleted FROM log ORDER BY rev, sub`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k []byte
		var c cur
		var deleted int16
		if err := rows.Scan(&k, &c.value, &c.create, &c.mod, &c.version, &c.lease, &deleted); err != nil {
			t.Fatal(err)
		}
		if deleted == 1 {
			if c.value != nil {
				t.Errorf("delete of %q at %d has a value %q, want NULL", k, c.mod, c.value)
			}
			delete(want, string(k))
			continue
		}
		want[string(k)] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	got := map[string]cur{}
	rows, err = conn.Query(ctx, `SELECT c.key, l.value, c.create_rev, c.mod_rev, c.version, c.lease FROM current c LEFT JOIN log l ON l.key = c.key AND l.rev = c.mod_rev`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k []byte
		var c cur
		if err := rows.Scan(&k, &c.value, &c.create, &c.mod, &c.version, &c.lease); err != nil {
			t.Fatal(err)
		}
		got[string(k)] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("current has %d keys, the log replays to %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || !bytes.Equal(g.value, w.value) || g.create != w.create || g.mod != w.mod || g.version != w.version || g.lease != w.lease {
			t.Errorf("current[%q] = %+v (present %v), log says %+v", k, g, ok, w)
		}
	}
}

// A replica that did not prune still learns the retention floor another
// replica set, so its History refuses revisions whose rows are gone.
func TestReplicaFollowsRetentionFloor(t *testing.T) {
	ctx := context.Background()
	_, dsn := openStore(t)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	open := func() *mvcc.Store {
		d, err := postgres.New(dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := mvcc.Open(ctx, d, mvcc.Options{Now: clock, Retain: mvcc.MinRetain, PruneInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	for i := range 20 {
		if _, err := a.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/f/k", fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(10 * time.Second)
		mu.Unlock()
	}
	if n, err := a.Prune(ctx); err != nil || n == 0 {
		t.Fatalf("prune: %d rows, %v", n, err)
	}
	want, err := a.HistoryFloor(ctx, []byte("/f/k"))
	if err != nil || want.Rev <= 1 {
		t.Fatalf("floor on the pruning replica: %v, %v", want, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := b.HistoryFloor(ctx, []byte("/f/k"))
		if err != nil {
			t.Fatal(err)
		}
		if got == want && b.RetainFloor() == a.RetainFloor() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other replica's floor is %v (retain floor %d), want %v (%d)", got, b.RetainFloor(), want, a.RetainFloor())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// History's reads on PostgreSQL: a Get at a time agrees with the revision
// it resolves to, and a key's Log (prev_kv chained in Go) agrees with the
// same entries read through the range Log (prev_kv joined in SQL).
func TestHistoryReads(t *testing.T) {
	ctx := context.Background()
	_, dsn := openStore(t)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	d, err := postgres.New(dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var times []int64
	write := func(ops ...*pb.RequestOp) {
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		times = append(times, now.UnixMilli())
		now = now.Add(time.Second)
		mu.Unlock()
	}
	write(putOp("/h/a", "a1"))
	write(putOp("/h/b", "b1"))
	write(putOp("/h/a", "a2"), putOp("/h/b", "b2"))
	write(delOp("/h/a", ""))
	write(putOp("/h/a", "a3"))
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
	all, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("/h/"), []byte("/h0")), Limit: 100, MaxBytes: 1 << 20})
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
		// A page that starts mid-chain looks up its first prev_kv.
		page, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte(key), nil), After: mvcc.LogCursor{Rev: want[0].Rev(), Sub: 1 << 30}, Limit: 100, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(page.Events[0]) != fmt.Sprint(want[1]) {
			t.Fatalf("log of %s after its first entry: %v, want %v", key, page.Events[0], want[1])
		}
	}
}
