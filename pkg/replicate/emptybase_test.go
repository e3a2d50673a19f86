package replicate_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate"
)

// The first base of a store with no commit yet has time 0 in its name. A
// restart must not take it for a base of 1970: neither due for renewal
// (a fresh base at every restart) nor past --replicate-retain-age (the
// store's first base and segments pruned, and every point before the new
// base with them).
func TestReplicateResumeAfterAnEmptyStoresBase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(9, 10))
	r := startReplicator(t, path, st)
	waitShipped(t, r, 1) // the first base, of the store with no commit, before any write
	revs := workload(t, c, rng, 20)
	waitShipped(t, r, revs[len(revs)-1])
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := replicate.List(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 1 || l.Bases[0].UnixMs != 0 {
		t.Fatalf("want one base of the empty store (time 0), got %+v", l.Bases)
	}

	r = startReplicator(t, path, st)
	defer r.Close()
	revs = workload(t, c, rng, 20)
	waitShipped(t, r, revs[len(revs)-1])
	if l, err = replicate.List(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 1 || l.Bases[0].Rev != 1 {
		t.Fatalf("after a restart the bucket holds bases %+v, want the first alone (revision 1)", l.Bases)
	}
	rc, _ := restored(t, st, replicate.Target{Rev: 2})
	_, want := state(t, c, 2)
	if rev, got := state(t, rc, 0); rev != 2 || got != want {
		t.Fatalf("restored revision %d:\n%s\nwant revision 2:\n%s", rev, got, want)
	}
}
