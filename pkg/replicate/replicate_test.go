package replicate_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/replicate"
)

// A store replicated under writes restores at any revision to exactly the
// state the original served at it, with the history before it and the same
// revisions; a restart resumes with no gap and no duplicate.
func TestReplicatePointInTime(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(1, 2))
	workload(t, c, rng, 50)
	r := startReplicator(t, path, st)
	revs := workload(t, c, rng, 200)
	waitShipped(t, r, revs[len(revs)-1])
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// Written while no replicator ran: shipped after the restart.
	revs = append(revs, workload(t, c, rng, 50)...)
	r = startReplicator(t, path, st)
	revs = append(revs, workload(t, c, rng, 100)...)
	last := revs[len(revs)-1]
	waitShipped(t, r, last)
	defer r.Close()

	l, err := replicate.List(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 1 {
		t.Fatalf("%d bases after a restart, want the one taken at the first start: %+v", len(l.Bases), l.Bases)
	}
	next := l.Bases[0].Rev + 1
	for _, s := range l.Segments {
		if s.First != next {
			t.Fatalf("segment %s starts at %d, want %d: a gap or a duplicate", s.Name, s.First, next)
		}
		next = s.Last + 1
	}
	if next-1 != last {
		t.Fatalf("segments end at %d, the store at %d", next-1, last)
	}

	check := func(rev int64) {
		t.Helper()
		rc, info := restored(t, st, replicate.Target{Rev: rev})
		if info.Target != rev {
			t.Fatalf("restored revision %d, want %d", info.Target, rev)
		}
		_, want := state(t, c, rev)
		gotRev, got := state(t, rc, 0)
		if gotRev != rev || got != want {
			t.Fatalf("restored at %d: revision %d, state\n%s\nwant\n%s", rev, gotRev, got, want)
		}
		// History before the point, as the original served it.
		for range 3 {
			old := l.Bases[0].Rev + rng.Int64N(rev-l.Bases[0].Rev+1)
			_, want := state(t, c, old)
			_, got := state(t, rc, old)
			if got != want {
				t.Fatalf("restored at %d, read at %d:\n%s\nwant\n%s", rev, old, got, want)
			}
		}
	}
	check(last)
	for range 5 {
		check(revs[rng.IntN(len(revs))])
	}
}

// While the object store fails, writes go on, the lag is a warning, and
// once it is back the backlog drains with no gap.
func TestReplicateObjectStoreDown(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	bdir := filepath.Join(dir, "bucket")
	st := bucket(t, bdir)
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(7, 8))
	r := startReplicator(t, path, st)
	defer r.Close()
	revs := workload(t, c, rng, 20)
	waitShipped(t, r, revs[len(revs)-1])

	// Down: the bucket's directory is a file.
	bucketAway(t, bdir)
	before := revs[len(revs)-1]
	revs = workload(t, c, rng, 100)
	deadline := time.Now().Add(20 * time.Second)
	for r.Status().LastErr == nil || r.Check(t.Context()) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no failure nor warning in 20 s with the bucket gone: %+v", r.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Writes go on while it fails, over many failed intervals.
	revs = append(revs, workload(t, c, rng, 100)...)
	last := revs[len(revs)-1]
	if s := r.Status(); s.Shipped >= last {
		t.Fatalf("shipped %d with the bucket gone", s.Shipped)
	}
	t.Logf("warning while down: %v", r.Check(t.Context()))

	// Back.
	bucketBack(t, bdir)
	waitShipped(t, r, last)
	l, err := replicate.List(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	next := l.Bases[0].Rev + 1
	for _, s := range l.Segments {
		if s.First != next {
			t.Fatalf("segment %s starts at %d, want %d", s.Name, s.First, next)
		}
		next = s.Last + 1
	}
	if next-1 != last {
		t.Fatalf("segments end at %d, the store at %d", next-1, last)
	}
	rc, _ := restored(t, st, replicate.Target{})
	_, want := state(t, c, last)
	if rev, got := state(t, rc, 0); rev != last || got != want {
		t.Fatalf("restored revision %d, state\n%s\nwant\n%s", rev, got, want)
	}
	// Every write acknowledged while the bucket was gone is in the
	// restored history at its revision: the whole key space at each
	// revision from the last shipped before the outage is the original's.
	for rev := before; rev <= last; rev++ {
		_, want := state(t, c, rev)
		if _, got := state(t, rc, rev); got != want {
			t.Fatalf("restored, read at %d:\n%s\nthe original at %d:\n%s", rev, got, rev, want)
		}
	}
}

// Scheduled bases and pruning keep a restorable chain: with a base every
// 100 ms and two kept, every revision from the oldest base kept is
// restored exactly, and older ones are refused.
func TestReplicateBasesAndPruning(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(9, 10))
	r, err := replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, path), Store: st,
		Interval: 10 * time.Millisecond, BaseInterval: 100 * time.Millisecond, RetainBases: 2})
	if err != nil {
		t.Fatal(err)
	}
	closeR := sync.OnceValue(r.Close)
	defer closeR()
	var revs []int64
	var l replicate.Listing
	for i := 0; ; i++ {
		revs = append(revs, workload(t, c, rng, 20)...)
		waitShipped(t, r, revs[len(revs)-1])
		if l, err = replicate.List(t.Context(), st); err != nil {
			t.Fatal(err)
		}
		if len(l.Bases) == 2 && l.Bases[0].Rev > revs[0] {
			break
		}
		if i == 500 {
			t.Fatalf("no second base pruned the first after 500 rounds: %+v", l.Bases)
		}
	}
	// Stopped, so that no base comes between the listing and the checks.
	if err := closeR(); err != nil {
		t.Fatal(err)
	}
	if l, err = replicate.List(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 2 {
		t.Fatalf("%d bases kept, want 2", len(l.Bases))
	}
	oldest := l.Bases[0].Rev
	for _, s := range l.Segments {
		if s.Last <= oldest {
			t.Fatalf("segment %s, before the oldest base kept (%d), not pruned", s.Name, oldest)
		}
	}
	var kept []int64
	for _, rev := range revs {
		if rev >= oldest {
			kept = append(kept, rev)
		}
	}
	for _, rev := range []int64{kept[0], kept[len(kept)/2], kept[len(kept)-1], kept[rng.IntN(len(kept))]} {
		rc, info := restored(t, st, replicate.Target{Rev: rev})
		_, want := state(t, c, rev)
		if got, s := state(t, rc, 0); got != rev || s != want || info.Target != rev {
			t.Fatalf("restored at %d: revision %d, state\n%s\nwant\n%s", rev, got, s, want)
		}
	}
	_, err = replicate.Restore(t.Context(), st, dialect(t, filepath.Join(t.TempDir(), "x.db")), replicate.Target{Rev: oldest - 1}, false)
	if err == nil {
		t.Fatalf("restored revision %d, before the oldest base kept", oldest-1)
	}
}

// A backlog that outlives the store's retention is never a silent gap:
// once retention's floor passes the last revision shipped, the replicator
// ships a fresh base, and a restore into the gap names the revisions no
// object holds.
func TestReplicateBacklogPastRetention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	bdir := filepath.Join(dir, "bucket")
	st := bucket(t, bdir)
	s, err := endpoint.Start(t.Context(), endpoint.Config{Listener: "127.0.0.1:0", Endpoint: "sqlite://" + path,
		RetainBytes: 4 << 10, PruneInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	r := startReplicator(t, path, st)
	defer r.Close()
	revs := workload(t, c, rng, 10)
	waitShipped(t, r, revs[len(revs)-1])
	shipped := r.Status().Shipped

	bucketAway(t, bdir)
	db, err := sqlite.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; ; i++ {
		workload(t, c, rng, 50)
		var floor int64
		if err := db.QueryRow(`SELECT MAX(COALESCE((SELECT MAX(value) FROM meta WHERE name = 'retain_floor'), 0), COALESCE((SELECT MAX(floor) FROM retention), 0))`).Scan(&floor); err != nil {
			t.Fatal(err)
		}
		if floor > shipped+1 {
			t.Logf("floor %d past %d after %d rounds", floor, shipped, i+1)
			break
		}
		if i == 200 {
			t.Fatalf("retention's floor %d still at or below %d after 10,000 writes", floor, shipped+1)
		}
	}
	last := waitBaseDue(t, c, r, shipped)
	bucketBack(t, bdir)
	waitShipped(t, r, last)
	l, err := replicate.List(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 2 || l.Bases[1].Rev <= shipped+1 {
		t.Fatalf("bases %+v, want a fresh one past revision %d", l.Bases, shipped+1)
	}
	rc, _ := restored(t, st, replicate.Target{})
	_, want := state(t, c, last)
	if rev, got := state(t, rc, 0); rev != last || got != want {
		t.Fatalf("restored revision %d, state\n%s\nwant\n%s", rev, got, want)
	}
	_, err = replicate.Restore(t.Context(), st, dialect(t, filepath.Join(t.TempDir(), "x.db")), replicate.Target{Rev: shipped + 1}, false)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("revisions %d-", shipped+1)) {
		t.Fatalf("restore into the gap: %v", err)
	}
}

// An idle store takes no scheduled base while its revision stands, across
// restarts too: the same copy again, by the same name, would be a whole
// upload each interval for nothing. The first write after brings the next
// scheduled base.
func TestReplicateIdleStoreTakesNoBase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(13, 14))
	cfg := func() replicate.Config {
		return replicate.Config{Dialect: dialect(t, path), Store: st,
			Interval: 10 * time.Millisecond, BaseInterval: 50 * time.Millisecond, RetainBases: 2}
	}
	revs := workload(t, c, rng, 20)
	bases := func() []replicate.Base {
		l, err := replicate.List(t.Context(), st)
		if err != nil {
			t.Fatal(err)
		}
		return l.Bases
	}
	for round := range 3 {
		r, err := replicate.Start(t.Context(), cfg())
		if err != nil {
			t.Fatal(err)
		}
		waitShipped(t, r, revs[len(revs)-1])
		time.Sleep(300 * time.Millisecond) // six base intervals, idle
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if n := r.Status().Objects; round > 0 && n != 0 {
			t.Fatalf("round %d: an idle store, restarted, put %d objects", round, n)
		}
		if b := bases(); len(b) != 1 || b[0].Rev != revs[len(revs)-1] {
			t.Fatalf("round %d: bases of an idle store at %d: %+v, want the one at its revision", round, revs[len(revs)-1], b)
		}
	}
	r, err := replicate.Start(t.Context(), cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	resp, err := c.Put(t.Context(), "/k/after-idle", "x")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b := bases()
		if len(b) == 2 && b[1].Rev == resp.Header.Revision {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no base at %d after a write to an idle store: %+v", resp.Header.Revision, b)
		}
	}
}

// A store put back from a backup keeps its lineage and is behind the
// bucket: Start refuses to ship it there, saying both ways out.
func TestReplicateRefusesABucketAhead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(15, 16))
	r := startReplicator(t, path, st)
	revs := workload(t, c, rng, 10)
	old := filepath.Join(dir, "old.db")
	if _, err := dialect(t, path).Backup(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	revs = append(revs, workload(t, c, rng, 10)...)
	waitShipped(t, r, revs[len(revs)-1])
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, old), Store: st, Interval: 10 * time.Millisecond})
	if err == nil {
		t.Fatal("a store behind its bucket shipped to it")
	}
	for _, want := range []string{fmt.Sprintf("holds revisions up to %d", revs[len(revs)-1]), "a prefix of its own", "restore --from"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
