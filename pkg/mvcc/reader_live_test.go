package mvcc_test

import (
	"bytes"
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// liveState records what ReadLive passes.
type liveState struct {
	rev, floor int64
	keys       []mvcc.LiveKey
	leases     map[int64]int64
}

func (l *liveState) Revision(rev, floor int64) error {
	l.rev, l.floor = rev, floor
	return nil
}

func (l *liveState) Key(kv mvcc.LiveKey) error {
	kv.Key, kv.Value = bytes.Clone(kv.Key), bytes.Clone(kv.Value)
	l.keys = append(l.keys, kv)
	return nil
}

func (l *liveState) Lease(id, ttl int64) error {
	l.leases[id] = ttl
	return nil
}

// A reader beside the server reads the live state a Range at the latest
// revision answers, key by key with every field, a page of 7 keys at a
// time, and the leases with their TTL.
func TestReadLive(t *testing.T) {
	eachBackend(t, backends, func(t *testing.T, b backend, db *testDB) {
		ctx := context.Background()
		defer mvcc.SetLivePage(7)()
		s := db.open(t, mvcc.Options{})
		hashWorkload(t, s, 0, 240)
		if _, err := s.Compact(ctx, s.Rev()-10); err != nil {
			t.Fatal(err)
		}
		r, err := mvcc.OpenReader(ctx, db.dialect())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := &liveState{leases: map[int64]int64{}}
		if err := r.ReadLive(ctx, got); err != nil {
			t.Fatal(err)
		}
		want, err := s.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
		if err != nil {
			t.Fatal(err)
		}
		if got.rev != want.Rev || got.floor != s.Rev()-10 {
			t.Errorf("revision %d floor %d, want %d and %d", got.rev, got.floor, want.Rev, s.Rev()-10)
		}
		if len(got.keys) != len(want.Kvs) || len(want.Kvs) < 50 {
			t.Fatalf("%d keys, the Range %d (want over 50: pages of 7)", len(got.keys), len(want.Kvs))
		}
		for i, w := range want.Kvs {
			g := got.keys[i]
			if !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || g.CreateRev != w.CreateRevision ||
				g.ModRev != w.ModRevision || g.Version != w.Version || g.Lease != w.Lease {
				t.Errorf("key %d: %+v, the Range %v", i, g, w)
			}
		}
		if len(got.leases) != 1 || got.leases[7] != 3600 {
			t.Errorf("leases %v, want 7 with TTL 3600", got.leases)
		}
	})
}
