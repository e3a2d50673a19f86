package integration

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/test/framework"
)

// HashKV through etcd's client, side by side with etcd: the hash at a
// revision stays what it was while later revisions commit, differs from
// another revision's, revision 0 is the latest, and a revision below the
// compaction floor or above the store's is etcd's refusal, word for word.
// On QuantyKube the hash at a revision also survives a compaction to it:
// it hashes the state, not the revisions a compaction kept (ADR-046).
func TestHashKV(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		for _, kv := range [][2]string{{"a", "1"}, {"b", "1"}, {"a", "2"}} { // 2, 3, 4
			_, err := cli.Put(ctx, kv[0], kv[1])
			must(t, err)
		}
		latest, err := cli.HashKV(ctx, s.Endpoint(), 0)
		must(t, err)
		if latest.HashRevision != 4 || latest.Header.Revision != 4 {
			t.Fatalf("HashKV(0): hash revision %d, header %d; want 4", latest.HashRevision, latest.Header.Revision)
		}
		at3, err := cli.HashKV(ctx, s.Endpoint(), 3)
		must(t, err)
		if at3.HashRevision != 3 || at3.Hash == latest.Hash {
			t.Fatalf("HashKV(3): revision %d hash %d; HashKV(4) hash %d", at3.HashRevision, at3.Hash, latest.Hash)
		}
		_, err = cli.Put(ctx, "c", "1") // 5
		must(t, err)
		for rev, want := range map[int64]uint32{3: at3.Hash, 4: latest.Hash} {
			again, err := cli.HashKV(ctx, s.Endpoint(), rev)
			must(t, err)
			if again.Hash != want || again.HashRevision != rev || again.Header.Revision != 5 {
				t.Fatalf("HashKV(%d) after a later put: hash %d at %d (header %d), before it %d", rev, again.Hash, again.HashRevision, again.Header.Revision, want)
			}
		}

		_, err = cli.Compact(ctx, 4)
		must(t, err)
		_, err = cli.HashKV(ctx, s.Endpoint(), 3)
		wantErr(t, err, codes.OutOfRange, "etcdserver: mvcc: required revision has been compacted")
		_, err = cli.HashKV(ctx, s.Endpoint(), 99)
		wantErr(t, err, codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")
		at4, err := cli.HashKV(ctx, s.Endpoint(), 4)
		must(t, err)
		if at4.HashRevision != 4 {
			t.Fatalf("HashKV(4) after Compact(4): hash revision %d", at4.HashRevision)
		}
		// etcd answers the hash its compaction stored, with the floor
		// before it (-1); QuantyKube hashes the state, with today's floor.
		if s.Backend() != framework.Etcd && (at4.Hash != latest.Hash || at4.CompactRevision != 4) {
			t.Fatalf("HashKV(4) after Compact(4): hash %d with floor %d; before it %d", at4.Hash, at4.CompactRevision, latest.Hash)
		}
	})
}
