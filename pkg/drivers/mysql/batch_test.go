package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/mytest"
)

func TestMain(m *testing.M) { framework.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

func dialectFor(t *testing.T, dsn string) *mysql.Dialect {
	t.Helper()
	d, err := mysql.New(dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openStore opens a store on a fresh database; without MariaDB the test
// is skipped, or fails under CI=true.
func openStore(t *testing.T) (*mvcc.Store, string) {
	t.Helper()
	dsn := framework.MySQLDatabase(t)
	return openReplica(t, dsn), dsn
}

func openReplica(t *testing.T, dsn string) *mvcc.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := mvcc.Open(ctx, dialectFor(t, dsn), mvcc.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sqlDB is the test's own connection to dsn (a mysql:// URL).
func sqlDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	conn, err := mytest.Connect(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
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

func modIs(k string, rev int64) []*pb.Compare {
	return []*pb.Compare{{Key: []byte(k), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}}
}

func txn(t *testing.T, s *mvcc.Store, r *pb.TxnRequest) *pb.TxnResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := s.Txn(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Values larger than half a packet go in statements and packets of their
// own: a batch of 48 MiB of values on a server whose max_allowed_packet
// is 64 MiB commits, and the tables agree.
func TestLargeBatchGoesInParts(t *testing.T) {
	s, dsn := openStore(t)
	big := string(bytes.Repeat([]byte("v"), 12<<20))
	txn(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("big/1", big), putOp("big/2", big)}})
	resp := txn(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("big/1", "small"), putOp("big/3", big), putOp("big/4", big), delOp("big/2", ""), rangeOp("big/", "big0")}})
	if got := resp.Responses[4].GetResponseRange(); got.Count != 3 {
		t.Fatalf("range: count %d, want 3", got.Count)
	}
	checkTables(t, dsn)
}

// Many clients at once on two replicas (so batches hold many requests,
// several on one key, and the replicas' batches interleave): the log and
// current agree, revisions have no holes, and every write is there.
func TestConcurrentBatches(t *testing.T) {
	a, dsn := openStore(t)
	b := openReplica(t, dsn)
	const clients, perClient, keys = 16, 30, 16
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		s := a
		if c%2 == 1 {
			s = b
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range perClient {
				k := fmt.Sprintf("k/%d", (c*perClient+i)%keys)
				ops := []*pb.RequestOp{putOp(k, fmt.Sprintf("%d-%d", c, i))}
				if i%4 == 3 {
					ops = []*pb.RequestOp{delOp(k, "")}
				}
				if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkTables(t, dsn)
}

// A replica that remembers a key's row assumes it (one round trip); when
// another replica changed it meanwhile, the check under the lock fails,
// nothing is written, and the batch runs again on what the database holds.
func TestAssumptionCheckedUnderTheLock(t *testing.T) {
	a, dsn := openStore(t)
	b := openReplica(t, dsn)
	created := txn(t, a, &pb.TxnRequest{Compare: modIs("k", 0), Success: []*pb.RequestOp{putOp("k", "a1")}}).Header.Revision
	for i := range 8 {
		txn(t, a, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(fmt.Sprintf("warm/%d", i), "x")}})
	}
	r := txn(t, b, &pb.TxnRequest{Compare: modIs("k", created), Success: []*pb.RequestOp{putOp("k", "b1")}})
	if !r.Succeeded {
		t.Fatal("b's update of k failed")
	}
	// At once, before a's tailer polls: a still assumes k at created.
	r = txn(t, a, &pb.TxnRequest{Compare: modIs("k", created), Success: []*pb.RequestOp{putOp("k", "a2")}, Failure: []*pb.RequestOp{rangeOp("k", "")}})
	if r.Succeeded {
		t.Fatal("a's update at the revision it remembered succeeded over b's")
	}
	if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "b1" {
		t.Fatalf("a's failed update read %v, want k = b1", kvs)
	}
	// A create of a key b made, which a never saw.
	txn(t, b, &pb.TxnRequest{Compare: modIs("x", 0), Success: []*pb.RequestOp{putOp("x", "b")}})
	if r := txn(t, a, &pb.TxnRequest{Compare: modIs("x", 0), Success: []*pb.RequestOp{putOp("x", "a")}}); r.Succeeded {
		t.Fatal("a created x over b's")
	}
	checkTables(t, dsn)
}

// The one-round-trip check is exact: a batch commits only when meta holds
// the state assumed, the writer's mark included, and the keys assumed
// absent are; then meta holds the batch's end state. Otherwise nothing is
// written and the error says which part differed.
func TestAssumptionCheckIsExact(t *testing.T) {
	s, dsn := openStore(t)
	p := txn(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("p", "1")}}).Header.Revision
	q := txn(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("q", "1")}}).Header.Revision
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := dialectFor(t, dsn)
	w, r, err := d.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	defer r.Close()
	db := sqlDB(t, dsn)
	readMeta := func() (st mvcc.BatchStart) {
		t.Helper()
		if err := db.QueryRowContext(ctx, "SELECT (SELECT value FROM meta WHERE name = 'rev'), (SELECT value FROM meta WHERE name = 'compact'), (SELECT value FROM meta WHERE name = 'last_unix_ms'), (SELECT value FROM meta WHERE name = 'last_writer')").Scan(&st.Rev, &st.Compact, &st.LastUnixMs, &st.Writer); err != nil {
			t.Fatal(err)
		}
		return st
	}
	start := readMeta()
	if start.Writer == 0 {
		t.Fatal("the store's batches left no writer's mark in meta")
	}
	stale, other := start, start
	stale.Rev--
	other.Writer++
	keys := [][]byte{[]byte("p"), []byte("q"), []byte("absent"), []byte("new")}
	written := &mvccpb.KeyValue{Key: []byte("new"), CreateRevision: start.Rev + 1, ModRevision: start.Rev + 1, Version: 1}
	for _, c := range []struct {
		name  string
		start mvcc.BatchStart
		revs  []int64
		put   []*mvccpb.KeyValue
		want  error
	}{
		{"meta changed", stale, []int64{p, q, 0, 0}, []*mvccpb.KeyValue{written}, mvcc.ErrAssumption},
		{"another replica's mark", other, []int64{p, q, 0, 0}, []*mvccpb.KeyValue{written}, mvcc.ErrAssumption},
		{"a key assumed absent exists", start, []int64{p, 0, 0, 0}, []*mvccpb.KeyValue{written}, mvcc.ErrAssumedRows},
		{"a key created exists", start, []int64{0, q, 0, 0}, []*mvccpb.KeyValue{written, {Key: []byte("p"), CreateRevision: start.Rev + 1, ModRevision: start.Rev + 1, Version: 1}}, mvcc.ErrAssumedRows},
		{"as assumed", start, []int64{p, q, 0, 0}, []*mvccpb.KeyValue{written}, nil},
	} {
		conn, err := w.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := &mvcc.Assumption{Start: c.start, Keys: keys, ModRevs: c.revs}
		bw := &mvcc.BatchWrites{Put: c.put, SetRev: true, Rev: start.Rev + 1, UnixMs: start.LastUnixMs + 1, Writer: start.Writer + 7}
		err = d.CommitAssumed(ctx, conn, a, bw)
		conn.Close()
		if !errors.Is(err, c.want) || (c.want != nil && err != c.want) {
			t.Fatalf("%s: CommitAssumed = %v, want %v", c.name, err, c.want)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM current WHERE `key` = 'new'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		want, wantMeta := 0, start
		if c.want == nil {
			want, wantMeta = 1, mvcc.BatchStart{Rev: bw.Rev, Compact: start.Compact, LastUnixMs: bw.UnixMs, Writer: bw.Writer}
		}
		if n != want {
			t.Fatalf("%s: the batch's row is there %d times, want %d", c.name, n, want)
		}
		if got := readMeta(); got != wantMeta {
			t.Fatalf("%s: meta holds %+v, want %+v", c.name, got, wantMeta)
		}
	}
}

// A batch whose writes the server refuses certainly did not commit: its
// requests are retried one by one, and only the refused one fails.
func TestRefusedBatchIsRetried(t *testing.T) {
	s, dsn := openStore(t)
	db := sqlDB(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE TRIGGER refuse_bad BEFORE INSERT ON current FOR EACH ROW BEGIN IF NEW.`key` = 'bad' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Hold the batch lock, so that the next puts queue up and go in one
	// batch.
	if _, err := conn.ExecContext(ctx, "START TRANSACTION; UPDATE meta SET value = value WHERE name = 'rev'"); err != nil {
		t.Fatal(err)
	}
	put := func(k string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(k, "v")}})
			done <- err
		}()
		return done
	}
	first := put("first")
	time.Sleep(200 * time.Millisecond)
	good, bad := put("good"), put("bad")
	time.Sleep(200 * time.Millisecond)
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := <-good; err != nil {
		t.Fatalf("a put batched with one the database refuses failed: %v", err)
	}
	if err := <-bad; err == nil || !strings.Contains(err.Error(), "refused by the test") {
		t.Fatalf("the refused put: got %v, want the database's refusal", err)
	}
	checkTables(t, dsn)
}

// An import refuses a database a server announced itself on, and a
// server refuses to open the store while an import holds it.
func TestImportRefusesWhileServed(t *testing.T) {
	dsn := framework.MySQLDatabase(t)
	s, err := mvcc.Open(t.Context(), dialectFor(t, dsn), mvcc.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := sqlDB(t, dsn)
	waitServerRows(t, db, 1)
	im, err := mvcc.BeginImport(t.Context(), dialectFor(t, dsn), mvcc.ImportOptions{Logger: quiet})
	if err == nil {
		im.Close()
		t.Fatal("import into a served database: no error")
	}
	if !strings.Contains(err.Error(), "a QuantyKube server is connected to") {
		t.Errorf("import into a served database: %v", err)
	}
	s.Close()
	waitServerRows(t, db, 0)
	im, err = mvcc.BeginImport(t.Context(), dialectFor(t, dsn), mvcc.ImportOptions{Logger: quiet})
	if err != nil {
		t.Fatalf("import once the server stopped: %v", err)
	}
	if s, err := mvcc.Open(t.Context(), dialectFor(t, dsn), mvcc.Options{Logger: quiet}); err == nil {
		s.Close()
		im.Close()
		t.Fatal("a server opened the store during an import")
	} else if !strings.Contains(err.Error(), "an import into") {
		t.Errorf("a server opening the store during an import: %v", err)
	}
	im.Close()
	s, err = mvcc.Open(t.Context(), dialectFor(t, dsn), mvcc.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("a server once the import ended: %v", err)
	}
	s.Close()
}

func waitServerRows(t *testing.T, db *sql.DB, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d servers' rows in meta, want %d", n, want)
		}
	}
}

// checkTables replays the log and compares it with current and meta.
func checkTables(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	db := sqlDB(t, dsn)
	var metaRev, maxRev, distinct int64
	if err := db.QueryRowContext(ctx, `SELECT (SELECT value FROM meta WHERE name = 'rev'), MAX(rev), COUNT(DISTINCT rev) FROM log`).Scan(&metaRev, &maxRev, &distinct); err != nil {
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
	rows, err := db.QueryContext(ctx, "SELECT `key`, value, create_rev, rev, version, lease, deleted FROM log ORDER BY rev, sub")
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
	rows, err = db.QueryContext(ctx, "SELECT c.`key`, l.value, c.create_rev, c.mod_rev, c.version, c.lease FROM current c LEFT JOIN log l ON l.`key` = c.`key` AND l.rev = c.mod_rev")
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
