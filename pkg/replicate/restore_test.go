package replicate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/replicate"
)

// Point in time (issue 54): restored at 10 random times between the first
// and the last commit, each store holds exactly what History's Get of the
// whole key space answers on the original at that time (every key, value,
// create and mod revision, version and lease, read a page at a time), at
// the revision History resolves the time to, and `check hash` (ADR-046)
// of the restored store, its history included, equals the original's at
// that revision. The seed is logged; QUANTY_TEST_SEED reruns it.
func TestRestoreAtRandomTimes(t *testing.T) {
	seed := rand.Uint64()
	if s, _ := strconv.ParseUint(os.Getenv("QUANTY_TEST_SEED"), 10, 64); s != 0 {
		seed = s
	}
	t.Logf("seed %d (QUANTY_TEST_SEED reruns it)", seed)
	rng := rand.New(rand.NewPCG(seed, 4))
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	r := startReplicator(t, path, st)
	defer r.Close()
	first := workload(t, c, rng, 1)[0]
	from := time.Now().UnixMilli()
	last := first
	for range 20 {
		revs := workload(t, c, rng, 1+rng.IntN(20))
		last = revs[len(revs)-1]
		// Spread the commits over milliseconds: a time then falls
		// between revisions, not only on one.
		time.Sleep(time.Duration(1+rng.IntN(3)) * time.Millisecond)
	}
	to := time.Now().UnixMilli()
	waitShipped(t, r, last)
	orig := reader(t, path)
	for range 10 {
		ms := from + rng.Int64N(to-from+1)
		rev, want := historyState(t, c, ms)
		out := filepath.Join(t.TempDir(), "restored.db")
		info, err := replicate.Restore(t.Context(), st, dialect(t, out), replicate.Target{At: time.UnixMilli(ms)}, false)
		if err != nil {
			t.Fatalf("restore at %d ms: %v", ms, err)
		}
		if info.Target != rev {
			t.Fatalf("restored at %d ms: revision %d; History's Get on the original reads %d", ms, info.Target, rev)
		}
		_, rc := serve(t, out)
		if gotRev, got := state(t, rc, 0); gotRev != rev || got != want {
			t.Fatalf("restored at %d ms: revision %d, state\n%s\nHistory's Get on the original at %d:\n%s", ms, gotRev, got, rev, want)
		}
		q := mvcc.HashQuery{Rev: rev, History: true, HistoryFrom: first - 1}
		wantHash, err := orig.Hash(t.Context(), q)
		if err != nil {
			t.Fatalf("hash of the original at %d: %v", rev, err)
		}
		gotHash, err := reader(t, out).Hash(t.Context(), q)
		if err != nil {
			t.Fatalf("hash of the store restored at %d: %v", rev, err)
		}
		if gotHash.Hex() != wantHash.Hex() || gotHash.Keys != wantHash.Keys || gotHash.Revisions != wantHash.Revisions {
			t.Fatalf("restored at %d ms (revision %d): hash %s (%d keys, %d revisions), the original's %s (%d keys, %d revisions)",
				ms, rev, gotHash.Hex(), gotHash.Keys, gotHash.Revisions, wantHash.Hex(), wantHash.Keys, wantHash.Revisions)
		}
		t.Logf("at %d ms: revision %d of %d..%d, %d keys, hash %s", ms, rev, first, last, wantHash.Keys, wantHash.Hex()[:16])
	}
}

// Every bad bucket is refused with an error naming what is wrong, and
// nothing is written where the store would go.
func TestRestoreRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	bdir := filepath.Join(dir, "bucket")
	st := bucket(t, bdir)
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(5, 6))
	workload(t, c, rng, 20)
	r := startReplicator(t, path, st)
	var last int64
	for range 6 {
		revs := workload(t, c, rng, 10)
		last = revs[len(revs)-1]
		waitShipped(t, r, last) // one segment or more each time
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := replicate.List(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Segments) < 3 {
		t.Fatalf("%d segments, want 3 or more", len(l.Segments))
	}
	mid := l.Segments[len(l.Segments)/2]

	// each copies the bucket, breaks it, restores into a new path.
	each := func(name string, target replicate.Target, breakIt func(bdir string), want ...string) {
		t.Run(name, func(t *testing.T) {
			b := filepath.Join(t.TempDir(), "bucket")
			if err := os.CopyFS(b, os.DirFS(bdir)); err != nil {
				t.Fatal(err)
			}
			breakIt(b)
			out := filepath.Join(t.TempDir(), "out", "restored.db")
			_, err := replicate.Restore(context.Background(), bucket(t, b), dialect(t, out), target, false)
			if err == nil {
				t.Fatal("restored")
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			entries, _ := os.ReadDir(filepath.Dir(out))
			for _, e := range entries {
				t.Errorf("left %s behind", e.Name())
			}
		})
	}
	object := func(b, name string) string { return filepath.Join(b, filepath.FromSlash(name)) }
	nothing := func(string) {}
	each("corrupted", replicate.Target{}, func(b string) {
		data, err := os.ReadFile(object(b, mid.Name))
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		if err := os.WriteFile(object(b, mid.Name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}, mid.Name)
	each("truncated", replicate.Target{}, func(b string) {
		if err := os.Truncate(object(b, mid.Name), mid.Size/2); err != nil {
			t.Fatal(err)
		}
	}, mid.Name, "truncated")
	each("missing", replicate.Target{}, func(b string) {
		if err := os.Remove(object(b, mid.Name)); err != nil {
			t.Fatal(err)
		}
	}, "segment missing", fmt.Sprintf("revisions %d-%d are in no object", mid.First, mid.Last))
	each("before the oldest base", replicate.Target{Rev: 2}, nothing, "revision 2 is before", l.Bases[0].Name)
	each("past the last", replicate.Target{Rev: last + 1}, nothing, "past the last")
	each("time before the oldest base", replicate.Target{At: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}, nothing, "2020-01-01T00:00:00.000Z is before", l.Bases[0].Name)
	each("time in the future", replicate.Target{At: time.Now().Add(time.Hour)}, nothing, "in the future")
	each("empty bucket", replicate.Target{}, func(b string) {
		if err := os.RemoveAll(filepath.Join(b, l.Lineage)); err != nil {
			t.Fatal(err)
		}
	}, "holds no base")

	// An existing store is replaced with force only.
	out := filepath.Join(t.TempDir(), "restored.db")
	if _, err := replicate.Restore(t.Context(), st, dialect(t, out), replicate.Target{Rev: last - 1}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := replicate.Restore(t.Context(), st, dialect(t, out), replicate.Target{}, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("restore over a store without force: %v", err)
	}
	info, err := replicate.Restore(t.Context(), st, dialect(t, out), replicate.Target{}, true)
	if err != nil || info.Target != last {
		t.Fatalf("restore with force: %+v, %v", info, err)
	}

	// The restored store has a lineage of its own: replicating it to the
	// bucket it came from is refused.
	_, err = replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, out), Store: st})
	if err == nil || !strings.Contains(err.Error(), "lineage") {
		t.Fatalf("a restored store replicated to its source bucket: %v", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	// So is a store put back from a backup file (restore FILE), even one
	// of the replicated store at the revision the bucket ends at: what it
	// commits next is not what the bucket's store commits next.
	backup := filepath.Join(t.TempDir(), "backup.db")
	if _, err := dialect(t, path).Backup(t.Context(), backup); err != nil {
		t.Fatal(err)
	}
	fromFile := filepath.Join(t.TempDir(), "from-file.db")
	if _, err := dialect(t, fromFile).Restore(t.Context(), backup, false); err != nil {
		t.Fatal(err)
	}
	_, err = replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, fromFile), Store: st})
	if err == nil || !strings.Contains(err.Error(), "lineage") {
		t.Fatalf("a store restored from a file replicated to its old bucket: %v", err)
	}
}

// A lease granted and revoked between two of the replicator's reads is in
// no segment's leases table; a restore between its keys' put and the
// revoke still has the lease, with the shortest TTL, so its keys go as
// they went on the original rather than live forever.
func TestRestoreLeaseInsideOneSegment(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	if _, err := c.Put(t.Context(), "/before", "x"); err != nil {
		t.Fatal(err)
	}
	r := startReplicator(t, path, st)
	waitShipped(t, r, 2)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// While no replicator reads: the lease lives and goes.
	l, err := c.Grant(t.Context(), 3600)
	if err != nil {
		t.Fatal(err)
	}
	put, err := c.Put(t.Context(), "/leased", "y", clientv3.WithLease(l.ID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Revoke(t.Context(), l.ID); err != nil {
		t.Fatal(err)
	}
	after, err := c.Put(t.Context(), "/after", "z")
	if err != nil {
		t.Fatal(err)
	}
	r = startReplicator(t, path, st)
	waitShipped(t, r, after.Header.Revision)
	r.Close()

	rc, info := restored(t, st, replicate.Target{Rev: put.Header.Revision})
	if info.Target != put.Header.Revision {
		t.Fatalf("restored revision %d, want %d", info.Target, put.Header.Revision)
	}
	g, err := rc.Get(t.Context(), "/leased")
	if err != nil || len(g.Kvs) != 1 || clientv3.LeaseID(g.Kvs[0].Lease) != l.ID {
		t.Fatalf("restored /leased: %+v, %v; want it with lease %x", g, err, l.ID)
	}
	ttl, err := rc.TimeToLive(t.Context(), l.ID)
	if err != nil || ttl.TTL <= 0 || ttl.GrantedTTL != mvcc.MinLeaseTTL {
		t.Fatalf("restored lease %x: %+v, %v; want it granted for %d s", l.ID, ttl, err, mvcc.MinLeaseTTL)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		g, err := rc.Get(t.Context(), "/leased")
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/leased still there 20 s after the restored store started: its lease never expires")
		}
	}
}
