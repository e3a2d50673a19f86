package integration

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/test/framework"
)

const (
	errCompactedText = "etcdserver: mvcc: required revision has been compacted"
	errFutureText    = "etcdserver: mvcc: required revision is a future revision"
)

func TestCompact(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		for i := 1; i <= 5; i++ {
			_, err := cli.Put(ctx, "k", fmt.Sprintf("v%d", i)) // revisions 2..6
			must(t, err)
		}
		_, err := cli.Put(ctx, "other", "o") // 7
		must(t, err)
		_, err = cli.Delete(ctx, "other") // 8
		must(t, err)

		c, err := cli.Compact(ctx, 4)
		must(t, err)
		if c.Header.Revision != 8 {
			t.Fatalf("compact response revision %d, want 8 (compaction takes no revision)", c.Header.Revision)
		}
		// Below the floor: compacted. At and above: readable, exactly.
		_, err = cli.Get(ctx, "k", clientv3.WithRev(3))
		wantErr(t, err, codes.OutOfRange, errCompactedText)
		_, err = cli.Get(ctx, "k", clientv3.WithRev(1))
		wantErr(t, err, codes.OutOfRange, errCompactedText)
		_, err = cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(3), clientv3.WithCountOnly())
		wantErr(t, err, codes.OutOfRange, errCompactedText)
		g, err := cli.Get(ctx, "k", clientv3.WithRev(4))
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v3", 2, 4, 3, 0)
		g, err = cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(7))
		must(t, err)
		wantKeys(t, g.Kvs, "k", "other")
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v5", 2, 6, 5, 0)
		// A txn reading below the floor fails as a whole.
		_, err = cli.Txn(ctx).Then(clientv3.OpGet("k", clientv3.WithRev(2))).Commit()
		wantErr(t, err, codes.OutOfRange, errCompactedText)

		// Compacting at or below the floor, or beyond the current revision.
		_, err = cli.Compact(ctx, 4)
		wantErr(t, err, codes.OutOfRange, errCompactedText)
		_, err = cli.Compact(ctx, 2)
		wantErr(t, err, codes.OutOfRange, errCompactedText)
		_, err = cli.Compact(ctx, 9)
		wantErr(t, err, codes.OutOfRange, errFutureText)
		_, err = cli.Compact(ctx, 100)
		wantErr(t, err, codes.OutOfRange, errFutureText)

		// Compacting at the current revision works (physical waits for it).
		c, err = cli.Compact(ctx, 8, clientv3.WithCompactPhysical())
		must(t, err)
		if c.Header.Revision != 8 {
			t.Fatalf("compact 8: response revision %d", c.Header.Revision)
		}
		_, err = cli.Get(ctx, "k", clientv3.WithRev(7))
		wantErr(t, err, codes.OutOfRange, errCompactedText)
		g, err = cli.Get(ctx, "k", clientv3.WithRev(8))
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v5", 2, 6, 5, 0)
		// The current state is intact and the next write takes the next revision.
		p, err := cli.Put(ctx, "k", "v6")
		must(t, err)
		if p.Header.Revision != 9 {
			t.Fatalf("put after compaction: revision %d, want 9", p.Header.Revision)
		}
		g, err = cli.Get(ctx, "k")
		must(t, err)
		wantKV(t, g.Kvs[0], "k", "v6", 2, 9, 6, 0)
	})
}
