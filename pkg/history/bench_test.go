//go:build unix

package history_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// History through gRPC on loopback, client and server in one process, for
// pprof (go test -bench . -cpuprofile, -memprofile). The data is a copy of
// `bench -history`'s filled store when QUANTY_BENCH_HISTORY_DB names one
// (its state.db, copied: the store locks the file it opens), otherwise a
// small store with one key of 1,000 revisions. Figures against the base
// commit and under real load are `bench -history`'s job; cpu-ms/op here is
// the process's CPU per request (user and system), which a machine shared
// with other work disturbs less than the wall time (getrusage: Unix only).

const (
	benchHot  = "/registry/growth/hot"
	benchObjs = 5000
)

func benchObj(i int) []byte { return fmt.Appendf(nil, "/registry/growth/obj/k%06d", i%benchObjs) }

type benchData struct {
	store        *mvcc.Store
	service      *history.Service
	client       historypb.HistoryClient
	fromMs, toMs int64
}

func benchSetup(b *testing.B) benchData {
	b.Helper()
	ctx := context.Background()
	path := os.Getenv("QUANTY_BENCH_HISTORY_DB")
	small := path == ""
	if small {
		path = filepath.Join(b.TempDir(), "b.db")
	}
	d, err := sqlite.New("sqlite://"+path, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	from := time.Now().UnixMilli()
	if small {
		value := bytes.Repeat([]byte("v"), 1024)
		for i := range 1000 {
			for _, k := range [][]byte{[]byte(benchHot), benchObj(i)} {
				if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: value}}}}}); err != nil {
					b.Fatal(err)
				}
			}
		}
	} else {
		// The first and last commit times of the filled store.
		page, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte(benchHot), nil), Limit: 1})
		if err != nil || len(page.Events) == 0 {
			b.Fatalf("%s has no %s: %v", path, benchHot, err)
		}
		from = page.Events[0].UnixMs
	}
	to := time.Now().UnixMilli()
	if !small {
		kv, err := s.KeyAt(ctx, []byte(benchHot), s.Rev())
		if err != nil || kv == nil {
			b.Fatalf("%s: %v", benchHot, err)
		}
		last, err := s.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte(benchHot), nil), FromRev: kv.ModRevision, Limit: 1})
		if err != nil || len(last.Events) == 0 {
			b.Fatalf("%s: %v", benchHot, err)
		}
		to = last.Events[0].UnixMs
	}
	svc := history.New(s)
	g := grpc.NewServer()
	svc.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go g.Serve(lis)
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return benchData{store: s, service: svc, client: historypb.NewHistoryClient(conn), fromMs: from, toMs: to}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchClients runs call b.N times on each of clients goroutines and
// reports the latencies' p50 and p99 and the CPU per call.
func benchClients(b *testing.B, clients int, call func(i int) error) {
	b.ReportAllocs()
	lat := make([][]time.Duration, clients)
	cpu0 := cpuTime()
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range b.N {
				t0 := time.Now()
				if err := call(c*b.N + i); err != nil {
					b.Error(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Sorted(slices.Values(slices.Concat(lat...)))
	if len(all) == 0 {
		return
	}
	at := func(p float64) float64 { return all[min(int(float64(len(all))*p), len(all)-1)].Seconds() * 1e3 }
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e3/float64(len(all)), "cpu-ms/op")
}

// BenchmarkLog reads the hot key's log, one page of up to 1,000 entries
// (about 1,000 at 10^6 revisions), each with kv and prev_kv.
func BenchmarkLog(b *testing.B) {
	d := benchSetup(b)
	ctx := context.Background()
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchClients(b, clients, func(int) error {
				resp, err := d.client.Log(ctx, &historypb.Request{Key: []byte(benchHot), Limit: 1000})
				if err == nil && len(resp.Entries) < 900 {
					err = fmt.Errorf("log: %d entries", len(resp.Entries))
				}
				return err
			})
		})
	}
}

// BenchmarkLogLayers is BenchmarkLog's request at one client through each
// layer in turn: the store's page alone, the service's answer encoded as
// gRPC would encode it, and the whole call over loopback (the client's
// decoding included).
func BenchmarkLogLayers(b *testing.B) {
	d := benchSetup(b)
	ctx := context.Background()
	req := &historypb.Request{Key: []byte(benchHot), Limit: 1000}
	kr := mvcc.NewKeyRange(req.Key, nil)
	b.Run("store", func(b *testing.B) {
		benchClients(b, 1, func(int) error {
			_, err := d.store.Log(ctx, mvcc.LogQuery{Range: kr, Limit: 1000, MaxBytes: history.MaxLogBytes})
			return err
		})
	})
	b.Run("service+encode", func(b *testing.B) {
		benchClients(b, 1, func(int) error {
			resp, err := d.service.Log(ctx, req)
			if err == nil {
				_, err = proto.Marshal(resp)
			}
			return err
		})
	})
	b.Run("grpc", func(b *testing.B) {
		benchClients(b, 1, func(int) error {
			_, err := d.client.Log(ctx, req)
			return err
		})
	})
}

// BenchmarkGetAtTime gets one of the objects at a random time in the
// data's span.
func BenchmarkGetAtTime(b *testing.B) {
	d := benchSetup(b)
	ctx := context.Background()
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchClients(b, clients, func(i int) error {
				at := d.fromMs + rand.Int64N(max(d.toMs-d.fromMs, 1))
				_, err := d.client.Get(ctx, &historypb.Request{Key: benchObj(i * 13), UnixMs: at})
				return err
			})
		})
	}
}

// bigKey is a key with bigKeyRevisions revisions of 1 MiB, each value its
// own: what one Log request with a large limit could ask a store for.
const (
	bigKey          = "/registry/configmaps/default/big"
	bigKeyRevisions = 200
)

// bigKeyStore is a SQLite store holding bigKey, closed when tb ends, and
// the History service on it.
func bigKeyStore(tb testing.TB) (*mvcc.Store, *history.Service) {
	tb.Helper()
	ctx := context.Background()
	d, err := sqlite.New("sqlite://"+filepath.Join(tb.TempDir(), "big.db"), sqlite.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	// Several writes in flight, so that the writer commits them in few
	// batches.
	var wg sync.WaitGroup
	for i := range bigKeyRevisions {
		v := make([]byte, 1<<20)
		copy(v, fmt.Sprintf("%08d", i))
		wg.Go(func() {
			if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(bigKey), Value: v}}}}}); err != nil {
				tb.Error(err)
			}
		})
		if i%16 == 15 {
			wg.Wait()
		}
	}
	wg.Wait()
	return s, history.New(s)
}

// BenchmarkLogLargeValues is one Log request with limit 10,000 over
// bigKey's 200 revisions of 1 MiB, for the key and for a range, from the
// start and from a continue token: what the service allocates per request
// (B/op) against the answer it returns (page-B, encoded as gRPC sends it).
func BenchmarkLogLargeValues(b *testing.B) {
	s, svc := bigKeyStore(b)
	ctx := context.Background()
	mid := fmt.Sprintf("%d.0", s.Rev()-bigKeyRevisions/2)
	for _, bc := range []struct {
		name string
		req  *historypb.Request
	}{
		{"key", &historypb.Request{Key: []byte(bigKey), Limit: 10000}},
		{"key/continue", &historypb.Request{Key: []byte(bigKey), Limit: 10000, Continue: mid}},
		{"range", &historypb.Request{Key: []byte("/registry/configmaps/"), RangeEnd: []byte("/registry/configmaps0"), Limit: 10000}},
		{"range/continue", &historypb.Request{Key: []byte("/registry/configmaps/"), RangeEnd: []byte("/registry/configmaps0"), Limit: 10000, Continue: mid}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			page := 0
			for b.Loop() {
				resp, err := svc.Log(ctx, bc.req)
				if err != nil || len(resp.Entries) == 0 {
					b.Fatalf("log: %v, %d entries", err, len(resp.GetEntries()))
				}
				page = proto.Size(resp)
			}
			b.ReportMetric(float64(page), "page-B")
		})
	}
}

// One refresh of the metrics by type (TypeUsage, ReportTypes): one pass
// over the log's sizes. s/op is what sets the refresh interval (at least
// 100 times as long); cpu-ms/op what it costs.
func BenchmarkTypeUsage(b *testing.B) {
	d := benchSetup(b)
	ctx := context.Background()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := d.service.TypeUsage(ctx, history.MetricTypes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e3/float64(b.N), "cpu-ms/op")
}
