package mysql_test

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// History's range at a revision (a recursive walk of the log's keys) reads
// on MariaDB what a Range at that revision reads, page by page.
func TestRangeAtMatchesRangeAtRevision(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for i := range 30 {
		k := fmt.Sprintf("/s/%02d", i%7)
		ops := []*pb.RequestOp{putOp(k, fmt.Sprintf("v%d", i))}
		if i%5 == 4 {
			ops = []*pb.RequestOp{delOp(k, "")}
		}
		txn(t, s, &pb.TxnRequest{Success: ops})
	}
	kr := mvcc.PrefixRange([]byte("/s/"))
	for rev := int64(1); rev <= s.Rev(); rev++ {
		want, err := s.Range(ctx, &pb.RangeRequest{Key: kr.Key, RangeEnd: kr.End, Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{1, 3, 500} {
			var got []*mvccpb.KeyValue
			q := mvcc.RangeAtQuery{Range: kr, Rev: rev, Limit: limit, MaxBytes: 3 << 20}
			for pages := 0; ; pages++ {
				page, err := s.RangeAt(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page.Kvs...)
				if !page.More || pages > 100 {
					break
				}
				q.After = page.Next
			}
			if len(got) != len(want.Kvs) {
				t.Fatalf("rev %d, limit %d: %d keys, want %d", rev, limit, len(got), len(want.Kvs))
			}
			for i := range got {
				if !proto.Equal(got[i], want.Kvs[i]) {
					t.Fatalf("rev %d, limit %d: key %d is %v, want %v", rev, limit, i, got[i], want.Kvs[i])
				}
			}
		}
	}
}
