package replicate_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/replicate"
)

// The first base of a new store holds no commit (its name's time is 0).
// A restart must not take it for a base from 1970: that took a fresh
// base at once and pruned the first by age, with every segment before
// the new one, so that nothing from before the restart could be
// restored. With serve's defaults (a base a day, kept 7 days) the bucket
// keeps the first base and the whole chain after it.
func TestReplicateFirstBaseOutlivesRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	st := bucket(t, filepath.Join(dir, "bucket"))
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(11, 12))
	var revs []int64
	for round := range 2 {
		r, err := replicate.Start(t.Context(), replicate.Config{Dialect: dialect(t, path), Store: st,
			Interval: 10 * time.Millisecond, RetainAge: replicate.DefaultRetainAge})
		if err != nil {
			t.Fatal(err)
		}
		waitShipped(t, r, 1) // round 0: the first base, of the store with no commit, before any write
		revs = append(revs, workload(t, c, rng, 20)...)
		waitShipped(t, r, revs[len(revs)-1])
		if err := r.Close(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	l, err := replicate.List(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 1 || l.Bases[0].Rev != 1 || l.Bases[0].UnixMs != 0 {
		t.Fatalf("bases after a restart: %+v, want the first alone (revision 1, no commit)", l.Bases)
	}
	rc, info := restored(t, st, replicate.Target{Rev: revs[0]})
	_, want := state(t, c, revs[0])
	if got, s := state(t, rc, 0); got != revs[0] || s != want || info.Target != revs[0] {
		t.Fatalf("restored at %d, before the restart: revision %d, state\n%s\nwant\n%s", revs[0], got, s, want)
	}
}
