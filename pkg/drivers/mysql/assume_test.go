package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
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
