package replicate_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/replicate"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// unreachable is a real bucket that, while down is set, fails every
// request as an object store out of reach does.
type unreachable struct {
	objstore.Store
	down atomic.Bool
}

var errDown = errors.New("dial tcp 127.0.0.1:9: connect: connection refused")

func (u *unreachable) List(ctx context.Context, prefix string) ([]objstore.Object, error) {
	if u.down.Load() {
		return nil, errDown
	}
	return u.Store.List(ctx, prefix)
}

func (u *unreachable) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if u.down.Load() {
		return errDown
	}
	return u.Store.Put(ctx, name, r, size)
}

// A server started while its object store is out of reach serves: the
// replicator starts, warns, holds retention and ships nothing; once the
// store answers it checks the bucket and ships a base and the rest.
func TestReplicateStartsWhileTheObjectStoreIsDown(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	u := &unreachable{Store: bucket(t, filepath.Join(dir, "bucket"))}
	u.down.Store(true)
	_, c := serve(t, path)
	rng := rand.New(rand.NewPCG(5, 6))
	revs := workload(t, c, rng, 20)
	r := startReplicator(t, path, u)
	defer r.Close()
	revs = append(revs, workload(t, c, rng, 20)...)
	if err := r.Check(t.Context()); err == nil {
		t.Fatal("no warning with the object store out of reach")
	}
	if h := r.Hold(); h != 1 {
		t.Fatalf("Hold %d with nothing known shipped, want 1 (the whole log)", h)
	}
	if s := r.Status(); s.Shipped != 0 || s.Objects != 0 {
		t.Fatalf("shipped %d (%d objects) into a bucket not yet listed", s.Shipped, s.Objects)
	}

	u.down.Store(false)
	last := revs[len(revs)-1]
	waitShipped(t, r, last)
	l, err := replicate.List(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Bases) != 1 || l.Lineage != r.Lineage() {
		t.Fatalf("bucket holds %d bases of lineage %s, want one of %s", len(l.Bases), l.Lineage, r.Lineage())
	}
	rc, _ := restored(t, u, replicate.Target{Rev: last})
	_, want := state(t, c, last)
	if rev, got := state(t, rc, 0); rev != last || got != want {
		t.Fatalf("restored revision %d:\n%s\nwant revision %d:\n%s", rev, got, last, want)
	}
}

// A bucket found, once it answers, to hold another store's replica is
// refused as at a start where it answered: nothing of this store goes in.
func TestReplicateDownAtStartThenAnotherLineage(t *testing.T) {
	dir := t.TempDir()
	bdir := filepath.Join(dir, "bucket")
	other := filepath.Join(dir, "other.db")
	_, oc := serve(t, other)
	orev := workload(t, oc, rand.New(rand.NewPCG(1, 2)), 10)
	or := startReplicator(t, other, bucket(t, bdir))
	waitShipped(t, or, orev[len(orev)-1])
	if err := or.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := replicate.List(t.Context(), bucket(t, bdir))
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(dir, "state.db")
	u := &unreachable{Store: bucket(t, bdir)}
	u.down.Store(true)
	_, c := serve(t, path)
	workload(t, c, rand.New(rand.NewPCG(3, 4)), 10)
	r := startReplicator(t, path, u)
	defer r.Close()
	u.down.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := r.Status().LastErr
		if err != nil && strings.Contains(err.Error(), "holds the replica of lineage "+before.Lineage) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the bucket answered, the status says %v, not that it holds lineage %s", err, before.Lineage)
		}
		time.Sleep(5 * time.Millisecond)
	}
	after, err := replicate.List(t.Context(), bucket(t, bdir))
	if err != nil {
		t.Fatal(err)
	}
	if after.Lineage != before.Lineage || len(after.Bases) != len(before.Bases) || len(after.Segments) != len(before.Segments) {
		t.Fatalf("the other store's bucket changed: %d bases, %d segments of %s, was %d, %d of %s",
			len(after.Bases), len(after.Segments), after.Lineage, len(before.Bases), len(before.Segments), before.Lineage)
	}
}
