package mvcc_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// The store's write path without gRPC, for pprof (go test -bench Txn
// -cpuprofile; QUANTY_BENCH_NO_INDEX=1 for a writer that reads its rows
// from SQL). As with the read benchmarks, figures against etcd are make
// bench's job.

// benchWriters shares b.N requests among 64 goroutines, as make bench's 64
// clients do, so that the writer batches them. newWriter(g) is goroutine
// g's: it makes and checks one request at a time.
func benchWriters(b *testing.B, keys int, newWriter func(s *mvcc.Store, g int) func() error) {
	s := benchStore(b, keys)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for g := range 64 {
		write := newWriter(s, g)
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := write(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkTxnCreate64 is kube-apiserver's create: put if absent.
func BenchmarkTxnCreate64(b *testing.B) {
	value := bytes.Repeat([]byte("v"), 1024)
	benchWriters(b, 0, func(s *mvcc.Store, g int) func() error {
		i := 0
		return func() error {
			i++
			key := fmt.Appendf(nil, "/registry/configmaps/default/w%02d-%08d", g, i)
			resp, err := s.Txn(context.Background(), &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{}}},
				Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: value}}}},
			})
			if err != nil || !resp.Succeeded {
				return fmt.Errorf("create %s: %v, %v", key, err, resp)
			}
			return nil
		}
	})
}

// BenchmarkTxnUpdate64 is kube-apiserver's update: put if unchanged, else
// get. Each writer updates its own keys, so every compare holds.
func BenchmarkTxnUpdate64(b *testing.B) {
	value := bytes.Repeat([]byte("u"), 1024)
	benchWriters(b, 0, func(s *mvcc.Store, g int) func() error {
		ctx := context.Background()
		keys := make([][]byte, 8)
		mods := make([]int64, 8)
		for j := range keys {
			keys[j] = fmt.Appendf(nil, "/registry/configmaps/default/w%02d-%d", g, j)
			mods[j] = put(b, s, string(keys[j]), value)
		}
		i := 0
		return func() error {
			j := i % len(keys)
			i++
			key := keys[j]
			resp, err := s.Txn(ctx, &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: mods[j]}}},
				Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: value}}}},
				Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
			})
			if err != nil || !resp.Succeeded {
				return fmt.Errorf("update %s at %d: %v, %v", key, mods[j], err, resp)
			}
			mods[j] = resp.Header.Revision
			return nil
		}
	})
}

// BenchmarkTxnLoad100 is a bulk load: transactions of 100 puts of 256
// bytes, one after another (make bench's start-up workload fills its
// store this way).
func BenchmarkTxnLoad100(b *testing.B) {
	s := benchStore(b, 0)
	ctx := context.Background()
	value := bytes.Repeat([]byte("l"), 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ops := make([]*pb.RequestOp, 100)
		for j := range ops {
			ops[j] = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "/registry/pods/default/p%08d", i*100+j), Value: value}}}
		}
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
			b.Fatal(err)
		}
	}
}
