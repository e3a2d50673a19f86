package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/test/framework"
)

// parseVersion reads "major.minor.patch" (anything after the patch number,
// like "-alpha.0", is ignored).
func parseVersion(v string) (major, minor, patch int, err error) {
	_, err = fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch)
	return
}

func TestStatusAndMemberList(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		_, err := cli.Put(ctx, "a", "1") // 2
		must(t, err)
		_, err = cli.Put(ctx, "b", "1") // 3
		must(t, err)

		st, err := cli.Status(ctx, s.Endpoint())
		must(t, err)
		if st.Header.Revision != 3 {
			t.Fatalf("Status revision %d, want 3", st.Header.Revision)
		}
		major, minor, patch, err := parseVersion(st.Version)
		if err != nil {
			t.Fatalf("Status version %q: %v", st.Version, err)
		}
		if major != 3 || minor < 5 || (minor == 5 && patch < 13) {
			t.Fatalf("Status version %q, want >= 3.5.13 (kube-apiserver needs it)", st.Version)
		}
		if st.DbSize <= 0 {
			t.Fatalf("Status db size %d", st.DbSize)
		}
		if st.Header.MemberId == 0 || st.Leader != st.Header.MemberId {
			t.Fatalf("Status: member %x leader %x, want a member that is its own leader", st.Header.MemberId, st.Leader)
		}

		ml, err := cli.MemberList(ctx)
		must(t, err)
		if len(ml.Members) != 1 {
			t.Fatalf("MemberList: %d members", len(ml.Members))
		}
		m := ml.Members[0]
		if m.ID != st.Header.MemberId || !slices.Contains(m.ClientURLs, s.Endpoint()) {
			t.Fatalf("member: id %x client urls %q, want id %x and %s", m.ID, m.ClientURLs, st.Header.MemberId, s.Endpoint())
		}
		if m.IsLearner {
			t.Fatalf("the only member is a learner")
		}

		_, err = cli.Defragment(ctx, s.Endpoint())
		must(t, err)
		g, err := cli.Get(ctx, "", clientv3.WithFromKey())
		must(t, err)
		if g.Count != 2 || g.Header.Revision != 3 {
			t.Fatalf("after defragment: count %d rev %d", g.Count, g.Header.Revision)
		}
	})
}

func TestOversizedRequest(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		// Just under the limit is fine.
		_, err := cli.Put(ctx, "big", strings.Repeat("x", 1<<20)) // 2
		must(t, err)

		const tooLarge = "etcdserver: request is too large"
		_, err = cli.Put(ctx, "huge", strings.Repeat("y", 1_600_000))
		wantErr(t, err, codes.InvalidArgument, tooLarge)
		ops := make([]clientv3.Op, 17)
		for i := range ops {
			ops[i] = clientv3.OpPut(fmt.Sprintf("part/%02d", i), strings.Repeat("z", 100_000))
		}
		_, err = cli.Txn(ctx).Then(ops...).Commit()
		wantErr(t, err, codes.InvalidArgument, tooLarge)

		g, err := cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
		must(t, err)
		if g.Header.Revision != 2 {
			t.Fatalf("revision after rejected requests %d, want 2", g.Header.Revision)
		}
		wantKeys(t, g.Kvs, "big")
		// The server still serves.
		p, err := cli.Put(ctx, "after", "v")
		must(t, err)
		if p.Header.Revision != 3 {
			t.Fatalf("put after rejected requests: revision %d", p.Header.Revision)
		}
	})
}
