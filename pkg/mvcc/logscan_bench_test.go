package mvcc_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// BenchmarkLogScan: a page of 500, newest first, over a log of 103,000
// rows (logscan.go): every row kept; one in two kept by the filter; none
// kept, so that the page reads its bound of rows (logScanRows) and ends
// empty with a continue token. A page of a wide range none of whose
// changes lie within logScanRows of its cursor. And RangeAt: 100 keys at
// a revision in the middle of their history.
func BenchmarkLogScan(b *testing.B) {
	s := benchStore(b, 0)
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 100)
	// A range of 3,000 changes (wide: past narrowRange), all older than
	// the 100,000 that follow.
	var sparseEnd mvcc.LogCursor
	for range 30 {
		ops := make([]*pb.RequestOp, 0, 100)
		for i := range 100 {
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
				Key: fmt.Appendf(nil, "/registry/secrets/sparse/k%03d", i), Value: value}}})
		}
		resp, err := s.Txn(ctx, &pb.TxnRequest{Success: ops})
		if err != nil {
			b.Fatal(err)
		}
		sparseEnd = mvcc.LogCursor{Rev: resp.Header.Revision, Sub: 99}
	}
	for range 1000 {
		ops := make([]*pb.RequestOp, 0, 100)
		for i := range 100 {
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
				Key: fmt.Appendf(nil, "/registry/configmaps/busy/k%03d", i), Value: value}}})
		}
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
			b.Fatal(err)
		}
	}
	kr := mvcc.NewKeyRange([]byte("/registry/"), []byte("/registry0"))
	for _, c := range []struct {
		name    string
		keep    func([]byte, int64) mvcc.Verdict
		entries int
	}{
		{"all", nil, 500},
		{"half", func(k []byte, _ int64) mvcc.Verdict { return verdict(k[len(k)-1]%2 == 0) }, 500},
		{"none", func([]byte, int64) mvcc.Verdict { return mvcc.Skip }, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Descending: true, Keep: c.keep, Limit: 500, MaxBytes: 3 << 20})
				if err != nil || len(page.Events) != c.entries || !page.More {
					b.Fatalf("log: %v, %d events (more %v), want %d", err, len(page.Events), page.More, c.entries)
				}
			}
		})
	}
	// A page of one change of the sparse range after its last: none
	// follows, and the page reads the log's next logScanRows rows, not
	// the 100,000 (issue 51), in either path.
	sparse := mvcc.PrefixRange([]byte("/registry/secrets/"))
	for _, c := range []struct {
		name string
		keep func([]byte, int64) mvcc.Verdict
	}{{"sparse", nil}, {"sparse-filtered", func([]byte, int64) mvcc.Verdict { return mvcc.Take }}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				page, err := s.Log(ctx, mvcc.LogQuery{Range: sparse, After: sparseEnd, Keep: c.keep, Limit: 1, MaxBytes: 3 << 20})
				if err != nil || len(page.Events) != 0 {
					b.Fatalf("log: %v, %d events", err, len(page.Events))
				}
			}
		})
	}
	b.Run("rangeat", func(b *testing.B) {
		rev := s.Rev() / 2
		busy := mvcc.PrefixRange([]byte("/registry/configmaps/busy/"))
		for b.Loop() {
			page, err := s.RangeAt(ctx, mvcc.RangeAtQuery{Range: busy, Rev: rev, Limit: 500, MaxBytes: 3 << 20})
			if err != nil || len(page.Kvs) != 100 || page.More {
				b.Fatalf("range at %d: %v, %d keys (more %v)", rev, err, len(page.Kvs), page.More)
			}
		}
	})
}
