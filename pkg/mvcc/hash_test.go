package mvcc_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// The state hash's fixed points: the hash of hashWorkload on any database.
// They pin the definition (hash.go): a change to it must change them, and
// every dialect must reach the same ones.
const (
	wantHashMid     = "419fe71aebf35ec5bddf51e2a23d422edbe83979c7917a0dba5ce2e3fb747988"
	wantHashLatest  = "4d71b47e231cb3bfa5af55f3938980c7550a79f16aca504d8cbd624fbff2c379"
	wantHashHistory = "565fafce985bb6ec6a279badb017240ffcc5ad35e87b282fb9b901661ad4292e"
)

// hashWorkload writes the same revisions on any store: its steps from to to,
// each one revision (a put, a put with a lease, a multi-key Txn, a delete
// of a range), over more keys than a page of the hash holds (SetHashPage).
func hashWorkload(t *testing.T, s *mvcc.Store, from, to int) {
	t.Helper()
	ctx := context.Background()
	if from == 0 {
		if _, err := s.Grant(ctx, mvcc.LeaseGrant{ID: 7, TTL: 3600}); err != nil {
			t.Fatal(err)
		}
	}
	for i := from; i < to; i++ {
		k := fmt.Appendf(nil, "/hash/%04d", i%150)
		switch i % 10 {
		case 3:
			txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(k, fmt.Sprint("leased ", i), 7)}})
		case 5:
			txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{
				putOp(k, fmt.Sprint("a", i), 0), putOp(append(k, '/', 'x'), fmt.Sprint("b", i), 0)}})
		case 9:
			txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{deleteRangeOp(fmt.Sprintf("/hash/%04d", i%150-4), string(k))}})
		default:
			txnResp(t, s, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(k, fmt.Sprint("value ", i, " \x00\xff"), 0)}})
		}
	}
}

// The hash is one definition on every database: the same writes give the
// same revisions and the same hash, whether the store's own, a reader's
// beside the running server, a store that stopped at an older revision,
// or an import of the state; one byte of one value changes it; revisions
// the store cannot answer are etcd's refusals.
func TestStateHash(t *testing.T) {
	eachBackend(t, backends, func(t *testing.T, b backend, db *testDB) {
		ctx := context.Background()
		defer mvcc.SetHashPage(7)()
		s := db.open(t, mvcc.Options{})
		hashWorkload(t, s, 0, 120)
		mid := s.Rev()
		hashWorkload(t, s, 120, 240)
		latest := s.Rev()

		hash := func(h interface {
			Hash(context.Context, mvcc.HashQuery) (*mvcc.HashResult, error)
		}, q mvcc.HashQuery) string {
			t.Helper()
			res, err := h.Hash(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			return res.Hex()
		}
		got := map[string]string{
			"mid":     hash(s, mvcc.HashQuery{Rev: mid}),
			"latest":  hash(s, mvcc.HashQuery{}),
			"history": hash(s, mvcc.HashQuery{Rev: latest, History: true, HistoryFrom: mid}),
		}
		want := map[string]string{"mid": wantHashMid, "latest": wantHashLatest, "history": wantHashHistory}
		for k := range want {
			if got[k] != want[k] {
				t.Errorf("hash %s = %s, want %s", k, got[k], want[k])
			}
		}
		for name, rev := range map[string]int64{"mid": mid, "latest": latest} {
			if h := stateHashOf(t, s, rev); h != got[name] {
				t.Errorf("hash %s = %s, the definition's byte stream over Range's answer gives %s", name, got[name], h)
			}
		}
		if hash(s, mvcc.HashQuery{Rev: latest}) != got["latest"] {
			t.Fatal("the hash at the latest revision named differs from revision 0's")
		}

		// A reader beside the running server.
		r, err := mvcc.OpenReader(ctx, db.dialect())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for q, name := range map[mvcc.HashQuery]string{{Rev: mid}: "mid", {}: "latest", {Rev: latest, History: true, HistoryFrom: mid}: "history"} {
			if h := hash(r, q); h != got[name] {
				t.Errorf("reader's hash %s = %s, the store's %s", name, h, got[name])
			}
		}

		// A store that stopped at mid.
		db2 := b.newDB(t)
		s2 := db2.open(t, mvcc.Options{})
		hashWorkload(t, s2, 0, 120)
		if h := hash(s2, mvcc.HashQuery{}); s2.Rev() != mid || h != got["mid"] {
			t.Errorf("a store stopped at %d: hash %s at %d, want %s", mid, h, s2.Rev(), got["mid"])
		}

		// An import of the latest state.
		db3 := b.newDB(t)
		res, err := s.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
		if err != nil {
			t.Fatal(err)
		}
		im, err := mvcc.BeginImport(ctx, db3.dialect(), mvcc.ImportOptions{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range res.Kvs {
			if err := im.Put(kv); err != nil {
				t.Fatal(err)
			}
		}
		if err := im.Lease(7, 3600); err != nil {
			t.Fatal(err)
		}
		if _, err := im.Commit(latest); err != nil {
			t.Fatal(err)
		}
		im.Close()
		r3, err := mvcc.OpenReader(ctx, db3.dialect())
		if err != nil {
			t.Fatal(err)
		}
		defer r3.Close()
		if h := hash(r3, mvcc.HashQuery{}); h != got["latest"] {
			t.Errorf("imported store's hash %s, want %s", h, got["latest"])
		}

		// Refusals: a future revision, one below the floor, a history
		// below it.
		if _, err := s.Compact(ctx, mid); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			q    mvcc.HashQuery
			want error
		}{
			{mvcc.HashQuery{Rev: latest + 1}, mvcc.ErrFutureRev},
			{mvcc.HashQuery{Rev: mid - 1}, mvcc.ErrCompacted},
			{mvcc.HashQuery{Rev: latest, History: true, HistoryFrom: mid - 1}, mvcc.ErrCompacted},
		} {
			for _, h := range []interface {
				Hash(context.Context, mvcc.HashQuery) (*mvcc.HashResult, error)
			}{s, r} {
				if _, err := h.Hash(ctx, c.q); !errors.Is(err, c.want) {
					t.Errorf("hash %+v: %v, want %v", c.q, err, c.want)
				}
			}
		}

		// One byte of one live value.
		q := fmt.Sprintf("UPDATE log SET value = %s WHERE key = %s AND rev = (SELECT mod_rev FROM current WHERE key = %s)", db.arg(1), db.arg(2), db.arg(3))
		if b.name == framework.MySQL {
			q = "UPDATE log SET value = ? WHERE `key` = ? AND rev = (SELECT mod_rev FROM current WHERE `key` = ?)"
		}
		key := []byte("/hash/0002")
		kv, err := s.Range(ctx, &pb.RangeRequest{Key: key})
		if err != nil || len(kv.Kvs) != 1 {
			t.Fatalf("%v %v", kv, err)
		}
		v := append([]byte(nil), kv.Kvs[0].Value...)
		v[0] ^= 1
		if _, err := db.raw.ExecContext(ctx, q, v, key, key); err != nil {
			t.Fatal(err)
		}
		if h := hash(r, mvcc.HashQuery{}); h == got["latest"] {
			t.Error("the hash did not change with one byte of one value")
		}
	})
}

// stateHashOf is the hash of the live keys at rev as hash.go's comment
// defines it, over one Range of every key at rev.
func stateHashOf(t *testing.T, s *mvcc.Store, rev int64) string {
	t.Helper()
	res, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write([]byte("quantykube state hash v1\x00"))
	num := func(v int64) { h.Write(binary.BigEndian.AppendUint64(nil, uint64(v))) }
	str := func(b []byte) { h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b)))); h.Write(b) }
	num(rev)
	for _, kv := range res.Kvs {
		str(kv.Key)
		str(kv.Value)
		num(kv.CreateRevision)
		num(kv.ModRevision)
		num(kv.Version)
		num(kv.Lease)
	}
	num(int64(len(res.Kvs)))
	return hex.EncodeToString(h.Sum(nil))
}
