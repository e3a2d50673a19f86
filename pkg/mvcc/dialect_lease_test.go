package mvcc_test

import (
	"context"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Leases on every database (the dialect suite, dialects_test.go).

// A replica follows every change another replica makes to the leases: a
// grant, a renewal (the database's clock decides it has not expired,
// whatever the replica's says), a revocation and an expiry with its key,
// by notification on PostgreSQL, by its poll on MySQL and behind a
// pooler.
func TestReplicaFollowsLeases(t *testing.T) {
	eachBackend(t, replicated, func(t *testing.T, be backend, db *testDB) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		a := db.open(t, mvcc.Options{Now: clock.Now})
		// b leaves expiry to a: it must learn of it.
		b := db.open(t, mvcc.Options{Now: clock.Now, LeaseCheckInterval: time.Hour})
		knows := func(id int64) bool { return slices.Contains(b.Leases(), id) }

		l, err := a.Grant(ctx, mvcc.LeaseGrant{TTL: 600})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "b knows the lease a granted", func() bool { return knows(l.ID) })
		clock.Advance(time.Hour)
		if info, err := b.TimeToLive(ctx, l.ID, false); err != nil || info.TTL != 0 {
			t.Fatalf("b's lease after its deadline: %+v, %v", info, err)
		}
		if _, err := a.Renew(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
		eventually(t, "b knows the renewal through a", func() bool {
			info, err := b.TimeToLive(ctx, l.ID, false)
			return err == nil && info.TTL > 0
		})
		if _, err := a.Revoke(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
		eventually(t, "b forgets the lease a revoked", func() bool { return !knows(l.ID) })

		// Expiry: a lease of the shortest TTL with a key, past its deadline
		// on the clock a reads and, soon after, on the database's.
		short, err := a.Grant(ctx, mvcc.LeaseGrant{TTL: mvcc.MinLeaseTTL})
		if err != nil {
			t.Fatal(err)
		}
		attached := putKey(t, ctx, a, "/n/leased", "x", short.ID)
		eventually(t, "b knows the short lease", func() bool { return knows(short.ID) })
		clock.Advance(time.Hour)
		eventually(t, "b forgets the lease a expired", func() bool { return !knows(short.ID) })
		eventually(t, "b publishes the expiry", func() bool { got, _, _ := b.Published(); return got > attached })
		if r, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("/n/leased")}); err != nil || len(r.Kvs) != 0 {
			t.Fatalf("the expired lease's key on b: %+v, %v", r, err)
		}
	})
}

// An imported lease's deadline starts when a server first opens the store,
// not at the import (docs/import.md): a lease shorter than the pause
// between the two is alive at the start, with its key, and it is started
// once, not at every open. Deadlines live in the database's clock, which
// the test waits out.
func TestImportedLeasesStartAtOpen(t *testing.T) {
	eachBackend(t, replicated, func(t *testing.T, be backend, db *testDB) {
		ctx := t.Context()
		const ttl = mvcc.MinLeaseTTL + 1
		im, err := mvcc.BeginImport(ctx, db.dialect(), mvcc.ImportOptions{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		defer im.Close()
		key := []byte("/registry/events/default/e")
		if err := im.Put(&mvccpb.KeyValue{Key: key, Value: []byte("ev"), CreateRevision: 5, ModRevision: 5, Version: 1, Lease: 7}); err != nil {
			t.Fatal(err)
		}
		if err := im.Lease(7, ttl); err != nil {
			t.Fatal(err)
		}
		if _, err := im.Commit(10); err != nil {
			t.Fatal(err)
		}
		imported := time.Now()
		time.Sleep(time.Until(imported.Add((ttl + 1) * time.Second)))

		s := db.open(t, mvcc.Options{})
		info, err := s.TimeToLive(ctx, 7, true)
		if err != nil || info.TTL < ttl-1 || len(info.Keys) != 1 {
			t.Fatalf("lease 7 at the first start, %d s after the import: %+v, %v; want about %d s left and its key", ttl+1, info, err, ttl)
		}
		res, err := s.Range(ctx, &pb.RangeRequest{Key: key})
		if err != nil || len(res.Kvs) != 1 {
			t.Fatalf("the lease's key at the start: %v, %v", res, err)
		}
		var marks int
		if err := db.raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM meta WHERE name LIKE 'imported_leases%'`).Scan(&marks); err != nil || marks != 0 {
			t.Errorf("the import's lease mark after the first start: %d, %v; want it gone", marks, err)
		}
	})
}
