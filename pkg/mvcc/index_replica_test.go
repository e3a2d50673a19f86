package mvcc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Where replicas share the database every replica keeps a live index,
// fed by its tailer with its own and the other replicas' batches: through
// random writes spread over two replicas, each one's reads are what SQL
// answers on the same database (the dialect suite, dialects_test.go).
func TestReplicaLiveIndexAnswersAsSQL(t *testing.T) {
	eachBackend(t, replicated, func(t *testing.T, be backend, _ *testDB) {
		for _, seed := range []uint64{1, 2} {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
				db := be.newDB(t)
				o := &indexOps{
					t: t, rnd: rand.New(rand.NewPCG(seed, seed)), keySpace: 40,
					// The second holds a few values: most come from the database.
					replicas: []*mvcc.Store{db.open(t, mvcc.Options{}), db.open(t, mvcc.Options{LiveIndexValueBytes: 24})},
					b:        db.open(t, mvcc.Options{DisableLiveIndex: true}),
				}
				for _, s := range o.replicas {
					if !s.IndexServing() {
						t.Fatal("a replica's live index does not serve")
					}
				}
				if o.b.IndexEnabled() {
					t.Fatal("the SQL replica has a live index")
				}
				for i := range 400 {
					o.step(i)
					if i%10 == 0 {
						o.compare()
					}
				}
				o.compare()
				for _, s := range o.replicas {
					if !s.IndexServing() || s.IndexRev() < o.b.Rev() {
						t.Fatalf("a replica's live index serves %v at revision %d, after the writes up to %d", s.IndexServing(), s.IndexRev(), o.b.Rev())
					}
				}
			})
		}
	})
}

// A replica's live index lags another replica's acknowledged write until
// its tailer reads it; a read there must not. It waits for the index to
// reach the revision the database had when the read began (etcd's
// ReadIndex). A serializable read may answer from the index as it is.
func TestReplicaLiveIndexReadWaitsForTheDatabase(t *testing.T) {
	eachBackend(t, replicated, testReplicaLiveIndexReadWaits)
}

func testReplicaLiveIndexReadWaits(t *testing.T, _ backend, db *testDB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := db.open(t, mvcc.Options{}), db.open(t, mvcc.Options{})
	get := func(serializable bool) (string, int64, error) {
		r, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("/f/k"), Serializable: serializable})
		if err != nil || len(r.Kvs) == 0 {
			return "", 0, err
		}
		return string(r.Kvs[0].Value), r.Rev, nil
	}
	old := putKey(t, ctx, a, "/f/k", "old", 0)
	if v, _, err := get(false); v != "old" || err != nil {
		t.Fatalf("b reads %q (%v), want old", v, err)
	}
	if b.IndexRev() < old {
		t.Fatalf("b's live index is at revision %d after a read at %d", b.IndexRev(), old)
	}

	release := b.HoldTailer()
	defer func() { release() }()
	rev := putKey(t, ctx, a, "/f/k", "new", 0)
	type answer struct {
		v   string
		rev int64
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, r, err := get(false)
		done <- answer{v, r, err}
	}()
	select {
	case got := <-done:
		t.Fatalf("with its tailer held, b answered %q at revision %d (%v) to a read that began after the write at %d was acknowledged", got.v, got.rev, got.err, rev)
	case <-time.After(300 * time.Millisecond):
	}
	if v, r, err := get(true); v != "old" || r >= rev || err != nil {
		t.Fatalf("a serializable read on b with its tailer held: %q at %d (%v), want old from its index", v, r, err)
	}
	if at := b.IndexRev(); at >= rev {
		t.Fatalf("b's live index reached revision %d with its tailer held", at)
	}
	release()
	release = func() {}
	got := <-done
	if got.v != "new" || got.rev < rev || got.err != nil {
		t.Fatalf("b answered %q at revision %d (%v), want new at %d or later", got.v, got.rev, got.err, rev)
	}
}
