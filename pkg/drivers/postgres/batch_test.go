package postgres_test

import (
	"context"
	"testing"
	"time"

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

// checkTables replays the log and compares it with current and meta.
func checkTables(t *testing.T, dsn string) {
	t.Helper()
	framework.CheckTables(t, sqlDB(t, dsn))
}
