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
// Range -cpuprofile; QUANTY_BENCH_NO_CACHE=1 for the SQL path instead of
// the current-state cache). Side-by-side figures against etcd and kine are
// make bench's job; these only show where a read's CPU goes.

func benchStore(b *testing.B, keys int) *mvcc.Store {
	b.Helper()
	d, err := sqlite.New("sqlite://" + filepath.Join(b.TempDir(), "b.db"))
	if err != nil {
		b.Fatal(err)
	}
	var opts mvcc.Options
	if os.Getenv("QUANTY_BENCH_NO_CACHE") != "" {
		opts.CacheBytes = -1 // the SQL read path
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

func BenchmarkRangeList500(b *testing.B) {
	s := benchStore(b, 500)
	ctx := context.Background()
	req := &pb.RangeRequest{Key: []byte("/registry/configmaps/default/"), RangeEnd: []byte("/registry/configmaps/default0"), Limit: 500}
	b.ReportAllocs()
	b.RunParallel(func(pb2 *testing.PB) {
		for pb2.Next() {
			r, err := s.Range(ctx, req)
			if err != nil || len(r.Kvs) != 500 || r.Count != 500 || r.More {
				b.Fatalf("list: %v, %d kvs, count %d", err, len(r.Kvs), r.Count)
			}
		}
	})
}

func BenchmarkRangeListPaged(b *testing.B) {
	s := benchStore(b, 500)
	ctx := context.Background()
	req := &pb.RangeRequest{Key: []byte("/registry/configmaps/default/"), RangeEnd: []byte("/registry/configmaps/default0"), Limit: 100}
	b.ReportAllocs()
	b.RunParallel(func(pb2 *testing.PB) {
		for pb2.Next() {
			r, err := s.Range(ctx, req)
			if err != nil || len(r.Kvs) != 100 || r.Count != 500 || !r.More {
				b.Fatalf("list: %v, %d kvs, count %d", err, len(r.Kvs), r.Count)
			}
		}
	})
}

// History's Log of one key with 1,000 revisions (issue 5's target).
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
		page, err := s.KeyLog(ctx, kr, 0, 0, 0, 1000, 64<<20)
		if err != nil || len(page.Events) != 1000 {
			b.Fatalf("log: %v, %d events", err, len(page.Events))
		}
	}
}
