package mvcc_test

import (
	"context"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Log's page bounds: a limit below one is the caller's mistake and says
// so (it used to index before the first entry), MaxBytes <= 0 bounds
// nothing, and a byte bound still returns one entry however large.
func TestLogPageBounds(t *testing.T) {
	ctx := context.Background()
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(ctx, d, mvcc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for range 5 {
		put(t, s, "/k", make([]byte, 100))
	}
	kr := mvcc.NewKeyRange([]byte("/k"), nil)
	for _, limit := range []int{0, -1} {
		if page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: limit}); err == nil {
			t.Errorf("Log with limit %d: %d entries and no error", limit, len(page.Events))
		}
	}
	for _, tc := range []struct {
		limit, maxBytes int
		want            int
		more            bool
	}{
		{limit: 10, maxBytes: 0, want: 5},
		{limit: 3, maxBytes: 0, want: 3, more: true},
		{limit: 10, maxBytes: 1, want: 1, more: true},
		{limit: 10, maxBytes: -1, want: 5},
	} {
		page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: tc.limit, MaxBytes: tc.maxBytes})
		if err != nil {
			t.Fatalf("Log limit %d maxBytes %d: %v", tc.limit, tc.maxBytes, err)
		}
		if len(page.Events) != tc.want || page.More != tc.more {
			t.Errorf("Log limit %d maxBytes %d: %d entries, more %v; want %d, more %v", tc.limit, tc.maxBytes, len(page.Events), page.More, tc.want, tc.more)
		}
	}
}

// One key's Log (read as a chain, each prev_kv the entry before) answers
// exactly what the range Log (a prev_kv lookup per row) does for the same
// changes, page by page: values, empty values, deletes and recreates, one
// entry per revision. Each
// value is its own: appending to one leaves the next entry's intact, though
// they are read into shared memory.
func TestKeyLogMatchesRangeLog(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, mvcc.Options{})
	// Two deletes of it in one revision, which etcd allows: still one
	// change, which is what lets the key's own Log order by revision alone.
	del := func(key string) {
		if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delRangeOp(key, ""), delRangeOp(key, key+"0")}}); err != nil {
			t.Fatal(err)
		}
	}
	put(t, s, "/j", []byte("before"))
	put(t, s, "/k", nil)
	put(t, s, "/k", []byte("a"))
	put(t, s, "/j", []byte("between"))
	put(t, s, "/k", []byte("bb"))
	del("/k")
	put(t, s, "/k", nil)
	put(t, s, "/k", []byte("ccc"))
	put(t, s, "/k0", []byte("after"))
	put(t, s, "/k", []byte("dddd"))

	pages := func(kr mvcc.KeyRange, limit int) []*mvcc.Event {
		var evs []*mvcc.Event
		var after mvcc.LogCursor
		for range 20 {
			page, err := s.Log(ctx, mvcc.LogQuery{Range: kr, After: after, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, page.Events...)
			if !page.More {
				return evs
			}
			after = page.Next
		}
		t.Fatal("Log: no last page")
		return nil
	}
	one := mvcc.NewKeyRange([]byte("/k"), nil)
	rng := mvcc.NewKeyRange([]byte("/k"), []byte("/k\x00"))
	want := pages(rng, 100)
	if len(want) != 7 {
		t.Fatalf("range Log: %d entries, want 7", len(want))
	}
	for _, limit := range []int{100, 3, 1} {
		got := pages(one, limit)
		if len(got) != len(want) {
			t.Fatalf("key Log, pages of %d: %d entries, want %d", limit, len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if i > 0 && g.Rev() <= got[i-1].Rev() {
				t.Errorf("key Log, pages of %d: entry %d at revision %d after %d", limit, i, g.Rev(), got[i-1].Rev())
			}
			if g.Type != w.Type || g.UnixMs != w.UnixMs || !proto.Equal(g.Kv, w.Kv) || !proto.Equal(g.PrevKv, w.PrevKv) ||
				(g.Kv.Value == nil) != (w.Kv.Value == nil) || (g.PrevKv == nil) != (w.PrevKv == nil) {
				t.Errorf("key Log, pages of %d, entry %d:\n got %v kv %v prev %v\nwant %v kv %v prev %v", limit, i, g.Type, g.Kv, g.PrevKv, w.Type, w.Kv, w.PrevKv)
			}
			if g.PrevKv != nil && (g.PrevKv.Value == nil) != (w.PrevKv.Value == nil) {
				t.Errorf("key Log, pages of %d, entry %d: prev_kv value nil %v, want %v", limit, i, g.PrevKv.Value == nil, w.PrevKv.Value == nil)
			}
		}
	}
	got := pages(one, 100)
	for i := range len(got) - 1 {
		next := string(got[i+1].Kv.Value)
		_ = append(got[i].Kv.Value, "XXXXXXXX"...)
		if string(got[i+1].Kv.Value) != next {
			t.Fatalf("appending to entry %d's value changed entry %d's: %q, was %q", i, i+1, got[i+1].Kv.Value, next)
		}
	}
}
