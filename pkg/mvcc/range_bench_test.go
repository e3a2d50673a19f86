package mvcc_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// The store-level read paths, without gRPC, for pprof (go test -bench
// Range -cpuprofile; QUANTY_BENCH_NO_INDEX=1 for the SQL path instead of
// the live index). Side-by-side figures against etcd and kine are
// make bench's job; these only show where a read's CPU goes.

func benchStore(b *testing.B, keys int) *mvcc.Store {
	b.Helper()
	d, err := sqlite.New("sqlite://"+filepath.Join(b.TempDir(), "b.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var opts mvcc.Options
	if os.Getenv("QUANTY_BENCH_NO_INDEX") != "" {
		opts.DisableLiveIndex = true // the SQL read path
	}
	s, err := mvcc.Open(context.Background(), d, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	value := bytes.Repeat([]byte("v"), 1024)
	for i := range keys {
		put(b, s, fmt.Sprintf("/registry/configmaps/default/k%05d", i), value)
	}
	// Keys on either side, so the prefix is a range inside a bigger table.
	put(b, s, "/registry/configmaps/a", value)
	put(b, s, "/registry/events/z", value)
	return s
}

func BenchmarkRangeGet(b *testing.B) {
	s := benchStore(b, 500)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb2 *testing.PB) {
		i := 0
		for pb2.Next() {
			i++
			r, err := s.Range(ctx, &pb.RangeRequest{Key: fmt.Appendf(nil, "/registry/configmaps/default/k%05d", i%500)})
			if err != nil || len(r.Kvs) != 1 {
				b.Fatalf("get: %v, %d kvs", err, len(r.Kvs))
			}
		}
	})
}

// benchList lists the 500 configmaps with limit, in parallel, checking
// every answer.
func benchList(b *testing.B, limit int64) {
	s := benchStore(b, 500)
	ctx := context.Background()
	req := &pb.RangeRequest{Key: []byte("/registry/configmaps/default/"), RangeEnd: []byte("/registry/configmaps/default0"), Limit: limit}
	b.ReportAllocs()
	b.RunParallel(func(pb2 *testing.PB) {
		for pb2.Next() {
			r, err := s.Range(ctx, req)
			if err != nil || int64(len(r.Kvs)) != limit || r.Count != 500 || r.More != (limit < 500) {
				b.Fatalf("list: %v, %d kvs, count %d, more %v", err, len(r.Kvs), r.Count, r.More)
			}
		}
	})
}

func BenchmarkRangeList500(b *testing.B) { benchList(b, 500) }

// BenchmarkRangeListPaged is kube-apiserver's paged list: 100 at a time,
// with the count of the whole range.
func BenchmarkRangeListPaged(b *testing.B) { benchList(b, 100) }

// BenchmarkKeyLog1000 reads one key's 1,000 retained changes as one Log
// page, as History's Log of a busy object does.
func BenchmarkKeyLog1000(b *testing.B) {
	s := benchStore(b, 10)
	value := bytes.Repeat([]byte("h"), 1024)
	for range 1000 {
		put(b, s, "/registry/configmaps/default/hot", value)
	}
	ctx := context.Background()
	kr := mvcc.NewKeyRange([]byte("/registry/configmaps/default/hot"), nil)
	b.ReportAllocs()
	for b.Loop() {
		page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: 1000, MaxBytes: 64 << 20})
		if err != nil || len(page.Events) != 1000 {
			b.Fatalf("log: %v, %d events", err, len(page.Events))
		}
	}
}

// BenchmarkRangeLog: a page of a narrow range (10 changes under a prefix)
// and of a wide one (1,000 of the 100,000 changes under /registry/), in a
// log of 100,000 rows: the narrow range is read through its keys, the
// wide one through the log from the cursor (logpage.go).
func BenchmarkRangeLog(b *testing.B) {
	s := benchStore(b, 0)
	ctx := context.Background()
	value := bytes.Repeat([]byte("v"), 100)
	for t := range 1000 {
		ops := make([]*pb.RequestOp, 0, 100)
		for i := range 100 {
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
				Key: fmt.Appendf(nil, "/registry/configmaps/busy/k%03d", i), Value: value}}})
		}
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
			b.Fatal(err)
		}
		if t%100 == 0 {
			put(b, s, "/registry/secrets/quiet/s", value)
		}
	}
	for _, c := range []struct {
		name         string
		start, end   string
		limit, wants int
	}{
		{"narrow", "/registry/secrets/quiet/", "/registry/secrets/quiet0", 1000, 10},
		{"wide", "/registry/", "/registry0", 1000, 1000},
	} {
		kr := mvcc.NewKeyRange([]byte(c.start), []byte(c.end))
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: c.limit, MaxBytes: 3 << 20})
				if err != nil || len(page.Events) != c.wants {
					b.Fatalf("log: %v, %d events, want %d", err, len(page.Events), c.wants)
				}
			}
		})
	}
}

// BenchmarkRangeWhileWriting is the SQL read path while the writer
// commits as fast as it can: a read's snapshot then often holds a batch
// not yet published, which it reads at the published revision instead
// (range.go, shownRev; ADR-037). The live index is off, so that reads at
// the latest revision take SQL as well.
func BenchmarkRangeWhileWriting(b *testing.B) {
	for _, c := range []struct {
		name string
		req  func(rev int64) *pb.RangeRequest
	}{
		{"get", func(int64) *pb.RangeRequest {
			return &pb.RangeRequest{Key: []byte("/registry/configmaps/default/k00042")}
		}},
		{"get at a past revision", func(rev int64) *pb.RangeRequest {
			return &pb.RangeRequest{Key: []byte("/registry/configmaps/default/k00042"), Revision: rev}
		}},
		{"list 500", func(int64) *pb.RangeRequest {
			return &pb.RangeRequest{Key: []byte("/registry/configmaps/default/"), RangeEnd: []byte("/registry/configmaps/default0")}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.Setenv("QUANTY_BENCH_NO_INDEX", "1")
			s := benchStore(b, 500)
			ctx := context.Background()
			past := s.Rev()
			stop, done := make(chan struct{}), make(chan int)
			go func() {
				n := 0
				defer func() { done <- n }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
						Key: []byte("/registry/leases/hot"), Value: []byte("v")}}}}}); err != nil {
						b.Error(err)
						return
					}
					n++
				}
			}()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb2 *testing.PB) {
				for pb2.Next() {
					r, err := s.Range(ctx, c.req(past))
					if err != nil || len(r.Kvs) == 0 {
						b.Fatalf("range: %v, %d kvs", err, len(r.Kvs))
					}
				}
			})
			b.StopTimer()
			close(stop)
			b.ReportMetric(float64(<-done)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
