package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// BenchmarkPooler is one client's requests to a store on PostgreSQL
// directly (prepared statements) and through PgBouncer in transaction
// mode (pgx's cache_describe, the dialect's choice there, and exec, the
// text-format alternative), to price the pooler and the statement modes
// (ADR-026): a create (one write batch), a get at the latest revision
// (the live index, after the database's revision), and a list of 100
// keys of 1 KiB from SQL (a REPEATABLE READ transaction).
func BenchmarkPooler(b *testing.B) {
	direct, pooled := pooledDatabase(b)
	value := bytes.Repeat([]byte("v"), 1024)
	for _, c := range []struct{ name, dsn string }{
		{"direct", direct},
		{"pgbouncer", pooled},
		{"pgbouncer-exec", pooled + "&default_query_exec_mode=exec"},
	} {
		for _, noIndex := range []bool{false, true} {
			d, err := postgres.New(c.dsn, postgres.Options{})
			if err != nil {
				b.Fatal(err)
			}
			s, err := mvcc.Open(b.Context(), d, mvcc.Options{Logger: quiet, DisableLiveIndex: noIndex})
			if err != nil {
				b.Fatal(err)
			}
			prefix := fmt.Sprintf("/%s-%v/", c.name, noIndex)
			for i := range 100 {
				put(b, s, fmt.Sprintf("%s%03d", prefix, i), value)
			}
			ctx := context.Background()
			if !noIndex {
				b.Run(c.name+"/create", func(b *testing.B) {
					for i := 0; b.Loop(); i++ {
						put(b, s, fmt.Sprintf("%sc/%08d", prefix, i), value)
					}
				})
				b.Run(c.name+"/get", func(b *testing.B) {
					for b.Loop() {
						if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(prefix + "042")}); err != nil {
							b.Fatal(err)
						}
					}
				})
			} else {
				b.Run(c.name+"/list100-sql", func(b *testing.B) {
					for b.Loop() {
						r, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(prefix[:len(prefix)-1] + "0"), Limit: 100})
						if err != nil || len(r.Kvs) != 100 {
							b.Fatalf("list: %v", err)
						}
					}
				})
			}
			s.Close()
		}
	}
}

func put(b *testing.B, s *mvcc.Store, key string, value []byte) {
	b.Helper()
	_, err := s.Txn(context.Background(), &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte(key), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: value}}}},
	})
	if err != nil {
		b.Fatal(err)
	}
}
