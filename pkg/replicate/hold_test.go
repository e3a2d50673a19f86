package replicate_test

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/replicate"
)

// retentionFloor is the highest floor of the store's retention rules.
func retentionFloor(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var floor int64
	if err := db.QueryRow(`SELECT MAX(COALESCE((SELECT MAX(value) FROM meta WHERE name = 'retain_floor'), 0), COALESCE((SELECT MAX(floor) FROM retention), 0))`).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	return floor
}

// holdServer serves the SQLite store at path with a 4 KiB retention
// budget pruned every 10 ms and held by the replicator rep will hold (none
// until it is stored), and returns a client, rep and a read-only handle
// on the file.
func holdServer(t *testing.T, path string) (*clientv3.Client, *atomic.Pointer[replicate.Replicator], *sql.DB) {
	t.Helper()
	rep := &atomic.Pointer[replicate.Replicator]{}
	s, err := endpoint.Start(t.Context(), endpoint.Config{Listener: "127.0.0.1:0", Endpoint: "sqlite://" + path,
		RetainBytes: 4 << 10, PruneInterval: 10 * time.Millisecond,
		RetentionHold: func() int64 {
			if r := rep.Load(); r != nil {
				return r.Hold()
			}
			return 0
		}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	db, err := sqlite.OpenReadOnly(path)
	if err != nil {
		c.Close()
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(); c.Close(); s.Close() })
	return c, rep, db
}

// While the bucket is away, the replicator holds the store's retention at
// the first revision not shipped: the floors stop there however far the
// rules would take them, the bucket's return needs no fresh base, and
// every revision of the outage restores. Past Config.Hold the hold goes,
// retention prunes, and a fresh base follows.
func TestReplicateHoldsRetention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	bdir := filepath.Join(dir, "bucket")
	st := bucket(t, bdir)
	c, rep, db := holdServer(t, path)
	rng := rand.New(rand.NewPCG(21, 22))
	start := func(hold time.Duration) *replicate.Replicator {
		r, err := replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, path), Store: st, Interval: 10 * time.Millisecond, Hold: hold})
		if err != nil {
			t.Fatal(err)
		}
		rep.Store(r)
		return r
	}

	r := start(time.Hour)
	revs := workload(t, c, rng, 10)
	waitShipped(t, r, revs[len(revs)-1])
	shipped := r.Status().Shipped
	bucketAway(t, bdir)
	// 1,000 writes: without the hold the 4 KiB budget moves the floor
	// past the last revision shipped within a few hundred
	// (TestReplicateBacklogPastRetention). With it, retention still runs
	// and stops at the hold.
	var outage []int64
	for range 20 {
		outage = append(outage, workload(t, c, rng, 50)...)
		if f := retentionFloor(t, db); f > shipped+1 {
			t.Fatalf("retention's floor %d passed the hold at %d (the first revision not shipped)", f, shipped+1)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); retentionFloor(t, db) != shipped+1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("retention's floor %d, want the hold %d: retention did not run up to it", retentionFloor(t, db), shipped+1)
		}
	}
	// The states to restore, read while the hold keeps them: once shipped,
	// retention prunes them from the store.
	last := outage[len(outage)-1]
	want := map[int64]string{}
	for _, rev := range []int64{shipped + 1, outage[rng.IntN(len(outage))], outage[rng.IntN(len(outage))], last} {
		_, want[rev] = state(t, c, rev)
	}
	bucketBack(t, bdir)
	waitShipped(t, r, last)
	l, err := replicate.List(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 1 {
		t.Fatalf("bases %+v: the outage took a fresh base", l.Bases)
	}
	for rev, w := range want {
		rc, _ := restored(t, st, replicate.Target{Rev: rev})
		if got, s := state(t, rc, 0); got != rev || s != w {
			t.Fatalf("restored at %d: revision %d, state\n%s\nwant\n%s", rev, got, s, w)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	// The bound: a hold of 200 ms lets retention past the first revision
	// not shipped once the oldest has waited that long.
	r = start(200 * time.Millisecond)
	defer r.Close()
	shipped = r.Status().Shipped
	bucketAway(t, bdir)
	began := time.Now()
	for i := 0; retentionFloor(t, db) <= shipped+1; i++ {
		if i == 400 {
			t.Fatalf("retention's floor still at or below %d after 20,000 writes", shipped+1)
		}
		workload(t, c, rng, 50)
	}
	if held := time.Since(began); held < 200*time.Millisecond {
		t.Fatalf("retention passed the hold after %s, before the 200ms bound", held)
	}
	bucketBack(t, bdir)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l, err := replicate.List(t.Context(), st)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Bases) == 2 && l.Bases[1].Rev > shipped+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bases %+v, want a fresh one past %d once the hold went", l.Bases, shipped+1)
		}
	}
}

// The hold's bound in bytes: while the bucket is away the hold keeps
// retention at the first revision not shipped until the store's files
// have grown by Config.HoldBytes, then lets retention prune, and the
// bucket's return brings a fresh base. The time bound (an hour) plays no
// part.
func TestReplicateHoldBytes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	bdir := filepath.Join(dir, "bucket")
	st := bucket(t, bdir)
	c, rep, db := holdServer(t, path)
	const holdBytes = 1 << 20
	r, err := replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, path), Store: st, Interval: 10 * time.Millisecond,
		Hold: time.Hour, HoldBytes: holdBytes})
	if err != nil {
		t.Fatal(err)
	}
	rep.Store(r)
	defer r.Close()
	rng := rand.New(rand.NewPCG(23, 24))
	revs := workload(t, c, rng, 10)
	waitShipped(t, r, revs[len(revs)-1])
	shipped := r.Status().Shipped
	bucketAway(t, bdir)
	size := func() int64 {
		var n int64
		for _, p := range []string{path, path + "-wal"} {
			if fi, err := os.Stat(p); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	// Values of 4 KiB: the 4 KiB retention budget would prune past the
	// hold at once, and the files grow by about 4 KiB a write.
	value := string(make([]byte, 4<<10))
	for deadline := time.Now().Add(20 * time.Second); r.Status().Behind.IsZero(); time.Sleep(5 * time.Millisecond) {
		if _, err := c.Put(t.Context(), "/big/first", value); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the replicator never saw a revision it could not ship")
		}
	}
	from := size()
	for i := 0; retentionFloor(t, db) <= shipped+1; i++ {
		if i == 2000 {
			t.Fatalf("retention's floor still at or below %d after 2,000 writes of 4 KiB, the files grown by %d bytes", shipped+1, size()-from)
		}
		if _, err := c.Put(t.Context(), fmt.Sprintf("/big/%d", i%50), value); err != nil {
			t.Fatal(err)
		}
	}
	// The replicator measured from when it first saw the backlog, a few
	// writes before from: half the bound leaves room for them.
	if grown := size() - from; grown < holdBytes/2 {
		t.Fatalf("retention passed the hold with the files grown by %d bytes, under half the %d bound", grown, holdBytes)
	}
	waitBaseDue(t, c, r, shipped)
	bucketBack(t, bdir)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l, err := replicate.List(t.Context(), st)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Bases) == 2 && l.Bases[1].Rev > shipped+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bases %+v, want a fresh one past %d once the hold went", l.Bases, shipped+1)
		}
	}
}
