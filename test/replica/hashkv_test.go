package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestReplicasAgreeOnHashKV: two replicas of one database answer HashKV
// alike at every revision, as etcd's members do (ADR-046), whichever
// replica wrote the changes, and a revision's hash stays what it was
// after later writes.
func TestReplicasAgreeOnHashKV(t *testing.T) {
	framework.Run(t, framework.Replicated, func(t *testing.T, b framework.Backend) {
		x := framework.Start(t, b, framework.Options{Process: true, Replicas: 2})
		clis := []*clientv3.Client{x.ReplicaClient(t, 0), x.ReplicaClient(t, 1)}
		eps := x.Endpoints()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var revs []int64
		for i := range 60 {
			c := clis[i%2]
			k := fmt.Sprintf("/h/%02d", i%7)
			var rev int64
			switch i % 5 {
			case 3:
				r, err := c.Delete(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				rev = r.Header.Revision
			case 4:
				r, err := c.Txn(ctx).Then(clientv3.OpPut(k, fmt.Sprint("t", i)), clientv3.OpPut(k+"/b", fmt.Sprint("u", i))).Commit()
				if err != nil {
					t.Fatal(err)
				}
				rev = r.Header.Revision
			default:
				r, err := c.Put(ctx, k, fmt.Sprint("v", i))
				if err != nil {
					t.Fatal(err)
				}
				rev = r.Header.Revision
			}
			revs = append(revs, rev)
		}
		last := revs[len(revs)-1]
		// Both have seen the last write before they are asked at it.
		for i, c := range clis {
			for {
				r, err := c.Get(ctx, "/h/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					t.Fatal(err)
				}
				if r.Header.Revision >= last {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("replica %d at revision %d, not %d", i, r.Header.Revision, last)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		hashes := func(rev int64) [2]uint32 {
			var h [2]uint32
			for i, c := range clis {
				r, err := c.HashKV(ctx, eps[i], rev)
				if err != nil {
					t.Fatalf("HashKV at %d on replica %d: %v", rev, i, err)
				}
				if r.HashRevision != rev {
					t.Fatalf("HashKV at %d on replica %d hashed revision %d", rev, i, r.HashRevision)
				}
				h[i] = r.Hash
			}
			if h[0] != h[1] {
				t.Fatalf("HashKV at %d: replica 0 %08x, replica 1 %08x", rev, h[0], h[1])
			}
			return h
		}
		at := []int64{revs[0], revs[len(revs)/3], revs[2*len(revs)/3], last}
		before := map[int64]uint32{}
		distinct := map[uint32]bool{}
		for _, rev := range at {
			before[rev] = hashes(rev)[0]
			distinct[before[rev]] = true
		}
		if len(distinct) != len(at) {
			t.Fatalf("hashes %v at revisions %v: different states hashed alike", before, at)
		}
		if _, err := clis[1].Put(ctx, "/h/later", "x"); err != nil {
			t.Fatal(err)
		}
		for _, rev := range at {
			if h := hashes(rev)[0]; h != before[rev] {
				t.Fatalf("HashKV at %d: %08x after a later write, %08x before", rev, h, before[rev])
			}
		}
	})
}
