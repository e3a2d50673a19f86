package sqlite_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func dialect(t *testing.T, path string) *sqlite.Dialect {
	t.Helper()
	d, err := sqlite.New("sqlite://"+path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openPools opens the dialect's writer and readers on path until the test
// ends; with noCheckpoint the writer's commits stop checkpointing.
func openPools(t *testing.T, path string, noCheckpoint bool) (d *sqlite.Dialect, w, r *sql.DB) {
	t.Helper()
	d = dialect(t, path)
	w, r, err := d.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	t.Cleanup(func() { r.Close() })
	t.Cleanup(func() { w.Close() })
	if noCheckpoint {
		if err := d.AutoCheckpoint(context.Background(), w, false); err != nil {
			t.Fatal(err)
		}
	}
	return d, w, r
}

func openStore(t *testing.T, path string) *mvcc.Store {
	t.Helper()
	s, err := mvcc.Open(context.Background(), dialect(t, path), mvcc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(t *testing.T, s *mvcc.Store, key, value string) {
	t.Helper()
	op := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value)}}}
	if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{op}}); err != nil {
		t.Fatal(err)
	}
}
