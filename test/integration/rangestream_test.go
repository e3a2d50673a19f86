package integration

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/test/framework"
)

// rangeStream merges a RangeStream's messages into one RangeResponse, as
// etcd's client does, and counts the messages.
func rangeStream(ctx context.Context, kv pb.KVClient, r *pb.RangeRequest) (*pb.RangeResponse, int, error) {
	st, err := kv.RangeStream(ctx, r)
	if err != nil {
		return nil, 0, err
	}
	out := &pb.RangeResponse{}
	n := 0
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return out, n, nil
		}
		if err != nil {
			return nil, n, err
		}
		n++
		rr := m.GetRangeResponse()
		out.Kvs = append(out.Kvs, rr.Kvs...)
		if rr.Header != nil {
			out.Header, out.More, out.Count = rr.Header, rr.More, rr.Count
		}
	}
}

// A RangeStream answers what Range answers, in chunks, whether the store
// reads it a page at a time (key order, no filters: kube-apiserver's lists)
// or whole, and keeps to one revision while writes land between its pages.
// etcd v3.6 has no RangeStream: QuantyKube's backends only.
func TestRangeStream(t *testing.T) {
	run(t, framework.QuantyKube, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		kv := pb.NewKVClient(cli.ActiveConnection())
		const keys = 2500 // pages of 1,000 keys: three
		value := make([]byte, 900)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < keys; i += 8 {
					if _, err := cli.Put(ctx, fmt.Sprintf("/s/%05d", i), fmt.Sprintf("%d%s", i, value)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		g, err := cli.Get(ctx, "/s/00007")
		must(t, err)
		mid := g.Header.Revision
		_, err = cli.Delete(ctx, "/s/00100")
		must(t, err)

		for _, r := range []*pb.RangeRequest{
			{Key: []byte("/s/"), RangeEnd: []byte("/s0")},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), KeysOnly: true},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), Limit: 2100},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), Limit: 300},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), Limit: 1000},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), Revision: mid},
			{Key: []byte("/s/00500"), RangeEnd: []byte("/s/02000"), SortOrder: pb.RangeRequest_ASCEND},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), SortOrder: pb.RangeRequest_DESCEND, Limit: 1500},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), MinModRevision: mid - 100},
			{Key: []byte("/s/"), RangeEnd: []byte("/s0"), CountOnly: true},
			{Key: []byte("/s/01234")},
			{Key: []byte("/t/"), RangeEnd: []byte("/t0")},
		} {
			want, err := kv.Range(ctx, r)
			must(t, err)
			got, msgs, err := rangeStream(ctx, kv, r)
			if err != nil {
				t.Fatalf("RangeStream %v: %v", r, err)
			}
			if got.Header.Revision != want.Header.Revision || got.Count != want.Count || got.More != want.More || len(got.Kvs) != len(want.Kvs) {
				t.Fatalf("RangeStream %v: rev %d count %d more %v, %d kvs; Range: rev %d count %d more %v, %d kvs",
					r, got.Header.Revision, got.Count, got.More, len(got.Kvs), want.Header.Revision, want.Count, want.More, len(want.Kvs))
			}
			for i := range want.Kvs {
				if !proto.Equal(got.Kvs[i], want.Kvs[i]) {
					t.Fatalf("RangeStream %v: kv %d is %v, Range's %v", r, i, got.Kvs[i].Key, want.Kvs[i].Key)
				}
			}
			if len(want.Kvs) > 1500 && msgs < 2 {
				t.Errorf("RangeStream %v: %d kvs in %d message", r, len(want.Kvs), msgs)
			}
		}

		// Writes while a stream reads its pages: it answers the state at
		// its first page's revision.
		stop := make(chan struct{})
		writerDone := make(chan error, 1)
		var writes atomic.Int64
		go func() {
			for i := 0; ; i++ {
				writes.Store(int64(i))
				select {
				case <-stop:
					writerDone <- nil
					return
				default:
				}
				k := fmt.Sprintf("/s/%05d", (i*7)%keys)
				var err error
				if i%3 == 0 {
					_, err = cli.Delete(ctx, k)
				} else {
					_, err = cli.Put(ctx, k, fmt.Sprint("moved", i))
				}
				if err != nil {
					writerDone <- err
					return
				}
			}
		}()
		moved := 0 // streams during which a write landed
		for range 20 {
			before := writes.Load()
			for writes.Load() < before+2 {
				time.Sleep(time.Millisecond)
			}
			before = writes.Load()
			got, _, err := rangeStream(ctx, kv, &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0")})
			if writes.Load() > before+1 {
				moved++
			}
			if err != nil {
				close(stop)
				t.Fatal(err)
			}
			at, err := cli.Get(ctx, "/s/", clientv3.WithRange("/s0"), clientv3.WithRev(got.Header.Revision))
			if err != nil {
				close(stop)
				t.Fatal(err)
			}
			if int64(len(got.Kvs)) != at.Count || got.Count != at.Count {
				close(stop)
				t.Fatalf("a stream at revision %d: %d kvs, count %d; the range at that revision holds %d", got.Header.Revision, len(got.Kvs), got.Count, at.Count)
			}
			for i, kv := range at.Kvs {
				if string(got.Kvs[i].Key) != string(kv.Key) || got.Kvs[i].ModRevision != kv.ModRevision || string(got.Kvs[i].Value) != string(kv.Value) {
					close(stop)
					t.Fatalf("a stream at revision %d: kv %d is %q@%d, the range at that revision %q@%d", got.Header.Revision, i, got.Kvs[i].Key, got.Kvs[i].ModRevision, kv.Key, kv.ModRevision)
				}
			}
		}
		close(stop)
		must(t, <-writerDone)
		if moved == 0 {
			t.Error("no write landed while a stream read its pages: the test proved nothing")
		}
	})
}
