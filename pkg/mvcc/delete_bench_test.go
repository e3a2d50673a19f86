package mvcc_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// BenchmarkDeleteRange20k is one DeleteRange of 20,000 keys of 1 KiB, the
// store alone (make bench's bigdelete workload runs it through gRPC, with
// a watcher and other clients, beside etcd).
func BenchmarkDeleteRange20k(b *testing.B) {
	const keys = 20_000
	d, err := sqlite.New("sqlite://"+filepath.Join(b.TempDir(), "b.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := mvcc.Open(context.Background(), d, mvcc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 1024)
	prefix := []byte("/registry/configmaps/big/")
	end := []byte("/registry/configmaps/big0")
	put(b, s, "/registry/configmaps/a", value)
	put(b, s, "/registry/events/z", value)
	for b.Loop() {
		b.StopTimer()
		for i := 0; i < keys; i += 100 {
			var ops []*pb.RequestOp
			for j := i; j < i+100; j++ {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "%sk%06d", prefix, j), Value: value}}})
			}
			if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		resp, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: prefix, RangeEnd: end}}}}})
		if err != nil || resp.Responses[0].GetResponseDeleteRange().Deleted != keys {
			b.Fatalf("delete: %v", err)
		}
	}
}
