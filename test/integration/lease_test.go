package integration

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/quantyroot/quantykube/test/framework"
)

func leaseIDs(t *testing.T, cli *clientv3.Client) []int64 {
	t.Helper()
	resp, err := cli.Leases(testCtx(t))
	must(t, err)
	var ids []int64
	for _, l := range resp.Leases {
		ids = append(ids, int64(l.ID))
	}
	slices.Sort(ids)
	return ids
}

func attachedKeys(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) (*clientv3.LeaseTimeToLiveResponse, []string) {
	t.Helper()
	resp, err := cli.TimeToLive(testCtx(t), id, clientv3.WithAttachedKeys())
	must(t, err)
	var keys []string
	for _, k := range resp.Keys {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	return resp, keys
}

func TestLeaseGrantRevoke(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		raw := pb.NewLeaseClient(cli.ActiveConnection())

		g, err := cli.Grant(ctx, 600)
		must(t, err)
		if g.ID <= 0 || g.TTL != 600 {
			t.Fatalf("grant: id %d ttl %d", g.ID, g.TTL)
		}
		const given = 0x1234
		rg, err := raw.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600, ID: given})
		must(t, err)
		if rg.ID != given || rg.TTL != 600 || rg.Error != "" {
			t.Fatalf("grant with id: %+v", rg)
		}
		_, err = raw.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600, ID: given})
		wantErr(t, err, codes.FailedPrecondition, "etcdserver: lease already exists")
		_, err = raw.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 9_000_000_001})
		wantErr(t, err, codes.OutOfRange, "etcdserver: too large lease TTL")
		if ids := leaseIDs(t, cli); !slices.Equal(ids, sortedIDs(int64(g.ID), given)) {
			t.Fatalf("leases %v", ids)
		}
		wantRev(t, cli, 1) // leases take no revision

		for _, k := range []string{"r/3", "r/1", "r/2"} { // 2..4
			_, err := cli.Put(ctx, k, "v:"+k, clientv3.WithLease(given))
			must(t, err)
		}
		_, err = cli.Put(ctx, "r/4", "v:r/4") // 5
		must(t, err)
		wch := watchCreated(t, ctx, cli, "r/", clientv3.WithPrefix(), clientv3.WithPrevKV())

		rv, err := cli.Revoke(ctx, given)
		must(t, err)
		if rv.Header.Revision != 6 {
			t.Fatalf("revoke response revision %d, want 6", rv.Header.Revision)
		}
		evs := collectEvents(t, wch, 3, 10*time.Second)
		for i, k := range []string{"r/1", "r/2", "r/3"} {
			ev := evs[i]
			if ev.Type != clientv3.EventTypeDelete || string(ev.Kv.Key) != k || ev.Kv.ModRevision != 6 ||
				ev.PrevKv == nil || string(ev.PrevKv.Value) != "v:"+k || ev.PrevKv.Lease != given {
				t.Fatalf("revoke event %d: %s, want DELETE %s at 6 with prev_kv", i, evString(ev), k)
			}
		}
		r, err := cli.Get(ctx, "r/", clientv3.WithPrefix())
		must(t, err)
		if r.Header.Revision != 6 {
			t.Fatalf("revision after revoke %d", r.Header.Revision)
		}
		wantKeys(t, r.Kvs, "r/4")
		ttl, err := cli.TimeToLive(ctx, given)
		must(t, err)
		if ttl.TTL != -1 {
			t.Fatalf("TimeToLive of a revoked lease: %d, want -1", ttl.TTL)
		}
		_, err = cli.Revoke(ctx, given)
		wantErr(t, err, codes.NotFound, "etcdserver: requested lease not found")

		// Revoking a lease without keys takes no revision.
		_, err = cli.Revoke(ctx, g.ID)
		must(t, err)
		wantRev(t, cli, 6)
		if ids := leaseIDs(t, cli); len(ids) != 0 {
			t.Fatalf("leases after revoking all: %v", ids)
		}
	})
}

func sortedIDs(ids ...int64) []int64 {
	slices.Sort(ids)
	return ids
}

func TestLeaseTimeToLive(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		g, err := cli.Grant(ctx, 600)
		must(t, err)
		for _, k := range []string{"t/2", "t/1"} {
			_, err := cli.Put(ctx, k, "v", clientv3.WithLease(g.ID))
			must(t, err)
		}
		resp, keys := attachedKeys(t, cli, g.ID)
		if resp.ID != g.ID || resp.GrantedTTL != 600 || resp.TTL < 590 || resp.TTL > 600 {
			t.Fatalf("TimeToLive: id %d granted %d ttl %d", resp.ID, resp.GrantedTTL, resp.TTL)
		}
		if !slices.Equal(keys, []string{"t/1", "t/2"}) {
			t.Fatalf("attached keys %q", keys)
		}
		plain, err := cli.TimeToLive(ctx, g.ID)
		must(t, err)
		if len(plain.Keys) != 0 || plain.GrantedTTL != 600 {
			t.Fatalf("TimeToLive without keys: keys %q granted %d", plain.Keys, plain.GrantedTTL)
		}
		// Deleting a key detaches it.
		_, err = cli.Delete(ctx, "t/1")
		must(t, err)
		if _, keys = attachedKeys(t, cli, g.ID); !slices.Equal(keys, []string{"t/2"}) {
			t.Fatalf("attached keys after delete %q", keys)
		}
		// An unknown lease answers TTL -1, not an error.
		unknown, err := cli.TimeToLive(ctx, 0x777)
		must(t, err)
		if unknown.TTL != -1 || unknown.ID != 0x777 {
			t.Fatalf("unknown lease TimeToLive: id %d ttl %d", unknown.ID, unknown.TTL)
		}
	})
}

func TestLeaseList(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)
		if ids := leaseIDs(t, cli); len(ids) != 0 {
			t.Fatalf("leases of an empty store: %v", ids)
		}
		var want []int64
		for range 3 {
			g, err := cli.Grant(ctx, 600)
			must(t, err)
			want = append(want, int64(g.ID))
		}
		slices.Sort(want)
		if ids := leaseIDs(t, cli); !slices.Equal(ids, want) {
			t.Fatalf("leases %v, want %v", ids, want)
		}
		_, err := cli.Revoke(ctx, clientv3.LeaseID(want[1]))
		must(t, err)
		if ids := leaseIDs(t, cli); !slices.Equal(ids, []int64{want[0], want[2]}) {
			t.Fatalf("leases after revoke %v", ids)
		}
	})
}

func TestLeaseKeepAlive(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		g, err := cli.Grant(ctx, 3)
		must(t, err)
		if g.TTL < 3 {
			t.Fatalf("granted TTL %d, want >= 3", g.TTL)
		}
		_, err = cli.Put(ctx, "ka", "v", clientv3.WithLease(g.ID)) // 2
		must(t, err)
		once, err := cli.KeepAliveOnce(ctx, g.ID)
		must(t, err)
		if once.ID != g.ID || once.TTL != g.TTL {
			t.Fatalf("KeepAliveOnce: id %d ttl %d", once.ID, once.TTL)
		}

		// Kept alive for longer than its TTL, the key stays.
		kctx, stop := context.WithCancel(ctx)
		kch, err := cli.KeepAlive(kctx, g.ID)
		must(t, err)
		responses := 0
		for end := time.After(time.Duration(g.TTL)*time.Second + 2*time.Second); ; {
			done := false
			select {
			case r, ok := <-kch:
				if !ok {
					t.Fatalf("keepalive channel closed after %d responses", responses)
				}
				if r.ID != g.ID || r.TTL != g.TTL {
					t.Fatalf("keepalive response: id %d ttl %d", r.ID, r.TTL)
				}
				responses++
			case <-end:
				done = true
			}
			if done {
				break
			}
		}
		if responses < 2 {
			t.Fatalf("%d keepalive responses", responses)
		}
		r, err := cli.Get(ctx, "ka")
		must(t, err)
		if r.Count != 1 {
			t.Fatalf("key of a kept-alive lease is gone")
		}
		ttl, err := cli.TimeToLive(ctx, g.ID)
		must(t, err)
		if ttl.TTL <= 0 || ttl.TTL > g.TTL {
			t.Fatalf("TimeToLive while kept alive: %d", ttl.TTL)
		}

		// Once the keepalives stop, the lease expires.
		stop()
		deadline := time.Now().Add(time.Duration(g.TTL)*time.Second + 10*time.Second)
		for {
			r, err := cli.Get(ctx, "ka")
			must(t, err)
			if r.Count == 0 {
				if r.Header.Revision != 3 {
					t.Fatalf("expiry revision %d, want 3", r.Header.Revision)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease did not expire after keepalives stopped")
			}
			time.Sleep(100 * time.Millisecond)
		}

		_, err = cli.KeepAliveOnce(ctx, g.ID)
		if err != rpctypes.ErrLeaseNotFound {
			t.Fatalf("KeepAliveOnce of an expired lease: %v", err)
		}
		// On the wire, a keepalive of an unknown lease is answered TTL 0 on the
		// stream, not with a stream error.
		stream, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseKeepAlive(ctx)
		must(t, err)
		must(t, stream.Send(&pb.LeaseKeepAliveRequest{ID: 0x999}))
		kr, err := stream.Recv()
		must(t, err)
		if kr.ID != 0x999 || kr.TTL != 0 {
			t.Fatalf("keepalive of unknown lease: id %d ttl %d", kr.ID, kr.TTL)
		}
		must(t, stream.CloseSend())
	})
}

func TestLeaseExpiry(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		granted := time.Now()
		g, err := cli.Grant(ctx, 1) // etcd raises this to its minimum TTL (2 s by default)
		must(t, err)
		if g.TTL < 1 {
			t.Fatalf("granted TTL %d", g.TTL)
		}
		_, err = cli.Put(ctx, "e/2", "v2", clientv3.WithLease(g.ID)) // 2
		must(t, err)
		_, err = cli.Put(ctx, "e/1", "v1", clientv3.WithLease(g.ID)) // 3
		must(t, err)
		_, err = cli.Put(ctx, "e/3", "v3") // 4
		must(t, err)
		wch := cli.Watch(ctx, "e/", clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(5))

		evs := collectEvents(t, wch, 2, time.Duration(g.TTL)*time.Second+10*time.Second)
		elapsed := time.Since(granted)
		for i, k := range []string{"e/1", "e/2"} {
			ev := evs[i]
			if ev.Type != clientv3.EventTypeDelete || string(ev.Kv.Key) != k || ev.Kv.ModRevision != 5 ||
				ev.PrevKv == nil || string(ev.PrevKv.Value) != "v"+k[2:] || ev.PrevKv.Lease != int64(g.ID) {
				t.Fatalf("expiry event %d: %s, want DELETE %s at 5 with prev_kv", i, evString(ev), k)
			}
		}
		t.Logf("Grant(1) answered TTL %d; the keys went after %v", g.TTL, elapsed.Round(time.Millisecond))
		if min := time.Duration(g.TTL)*time.Second - 500*time.Millisecond; elapsed < min {
			t.Fatalf("lease with TTL %ds expired after %v", g.TTL, elapsed)
		}
		r, err := cli.Get(ctx, "e/", clientv3.WithPrefix())
		must(t, err)
		if r.Header.Revision != 5 {
			t.Fatalf("revision after expiry %d, want 5", r.Header.Revision)
		}
		wantKeys(t, r.Kvs, "e/3")
		ttl, err := cli.TimeToLive(ctx, g.ID)
		must(t, err)
		if ttl.TTL != -1 {
			t.Fatalf("TimeToLive of an expired lease: %d", ttl.TTL)
		}
		if ids := leaseIDs(t, cli); len(ids) != 0 {
			t.Fatalf("expired lease still listed: %v", ids)
		}
		noMoreEvents(t, wch, 200*time.Millisecond)
	})
}

func TestLeaseSurvivesRestart(t *testing.T) {
	run(t, framework.WithPooler, func(t *testing.T, s *framework.Target) {
		cli := s.Client(t)
		ctx := testCtx(t)

		const kept = 0x5151
		_, err := pb.NewLeaseClient(cli.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600, ID: kept})
		must(t, err)
		other, err := cli.Grant(ctx, 600)
		must(t, err)
		short, err := cli.Grant(ctx, 2)
		must(t, err)
		_, err = cli.Put(ctx, "r/1", "v1", clientv3.WithLease(kept)) // 2
		must(t, err)
		_, err = cli.Put(ctx, "r/2", "v2", clientv3.WithLease(kept)) // 3
		must(t, err)
		_, err = cli.Put(ctx, "r/3", "v3") // 4
		must(t, err)
		_, err = cli.Put(ctx, "s/1", "short", clientv3.WithLease(short.ID)) // 5
		must(t, err)
		_, err = cli.Compact(ctx, 3)
		must(t, err)

		s.Restart(t)
		cli = s.Client(t)

		r, err := cli.Get(ctx, "r/", clientv3.WithPrefix())
		must(t, err)
		wantKeys(t, r.Kvs, "r/1", "r/2", "r/3")
		wantKV(t, r.Kvs[0], "r/1", "v1", 2, 2, 1, kept)
		if rev := r.Header.Revision; rev != 5 && rev != 6 { // 6 if the short lease already expired
			t.Fatalf("revision after restart %d", rev)
		}
		_, err = cli.Get(ctx, "r/1", clientv3.WithRev(2))
		wantErr(t, err, codes.OutOfRange, errCompactedText)

		ttl, keys := attachedKeys(t, cli, kept)
		if ttl.GrantedTTL != 600 || ttl.TTL <= 0 || ttl.TTL > 600 || !slices.Equal(keys, []string{"r/1", "r/2"}) {
			t.Fatalf("lease after restart: granted %d ttl %d keys %q", ttl.GrantedTTL, ttl.TTL, keys)
		}
		if ids := leaseIDs(t, cli); !slices.Contains(ids, kept) || !slices.Contains(ids, int64(other.ID)) {
			t.Fatalf("leases after restart %v", ids)
		}
		ka, err := cli.KeepAliveOnce(ctx, kept)
		must(t, err)
		if ka.TTL != 600 {
			t.Fatalf("keepalive after restart: ttl %d", ka.TTL)
		}

		// The short lease still expires after the restart, in one revision.
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := cli.Get(ctx, "s/1")
			must(t, err)
			if r.Count == 0 {
				if r.Header.Revision != 6 {
					t.Fatalf("revision after expiry %d, want 6", r.Header.Revision)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("short lease did not expire after restart")
			}
			time.Sleep(100 * time.Millisecond)
		}

		rv, err := cli.Revoke(ctx, kept)
		must(t, err)
		if rv.Header.Revision != 7 {
			t.Fatalf("revoke after restart: revision %d, want 7", rv.Header.Revision)
		}
		r, err = cli.Get(ctx, "r/", clientv3.WithPrefix())
		must(t, err)
		wantKeys(t, r.Kvs, "r/3")
		p, err := cli.Put(ctx, "after", "v")
		must(t, err)
		if p.Header.Revision != 8 {
			t.Fatalf("put after restart: revision %d, want 8", p.Header.Revision)
		}
	})
}
