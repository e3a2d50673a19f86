package mvcc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func openStore(t testing.TB, opts mvcc.Options) *mvcc.Store {
	t.Helper()
	d, err := sqlite.New("sqlite://"+filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.Open(context.Background(), d, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// indexOps drives two stores, one answering latest reads from the live index and
// one from SQL, through the same random writes. With replicas set, a is
// unused: the stores in replicas and b share one database, each write goes
// to one replica picked at random, and every replica's reads (from its live
// index) are compared with b's (from SQL).
type indexOps struct {
	t        *testing.T
	rnd      *rand.Rand
	a, b     *mvcc.Store
	replicas []*mvcc.Store
	leases   []int64
	keySpace int
}

// writers are the stores each write goes to.
func (o *indexOps) writers() []*mvcc.Store {
	if len(o.replicas) > 0 {
		return []*mvcc.Store{o.replicas[o.rnd.IntN(len(o.replicas))]}
	}
	return []*mvcc.Store{o.a, o.b}
}

func (o *indexOps) key() []byte { return fmt.Appendf(nil, "/k/%03d", o.rnd.IntN(o.keySpace)) }

func (o *indexOps) txn(req *pb.TxnRequest) {
	o.t.Helper()
	ctx := context.Background()
	if len(o.replicas) > 0 {
		// One database: nothing to compare the answer with. A refused
		// request (a key put twice in one Txn) changes nothing either way.
		o.writers()[0].Txn(ctx, req)
		return
	}
	ra, errA := o.a.Txn(ctx, req)
	rb, errB := o.b.Txn(ctx, req)
	if (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
		o.t.Fatalf("txn errors differ: index %v, sql %v", errA, errB)
	}
	if errA == nil && !proto.Equal(ra, rb) {
		o.t.Fatalf("txn answers differ:\nindex  %v\nsql    %v", ra, rb)
	}
}

func putOp(k []byte, v string, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: []byte(v), Lease: lease, PrevKv: true}}}
}

func (o *indexOps) step(i int) {
	switch n := o.rnd.IntN(100); {
	case n < 50:
		var lease int64
		if len(o.leases) > 0 && o.rnd.IntN(4) == 0 {
			lease = o.leases[o.rnd.IntN(len(o.leases))]
		}
		o.txn(&pb.TxnRequest{Success: []*pb.RequestOp{putOp(o.key(), fmt.Sprint("v", i), lease)}})
	case n < 60:
		k := o.key()
		o.txn(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, IgnoreValue: true, IgnoreLease: true}}}}})
	case n < 70:
		o.txn(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: o.key(), PrevKv: true}}}}})
	case n < 73:
		k1, k2 := o.key(), o.key()
		o.txn(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: k1, RangeEnd: k2}}}}})
	case n < 88:
		// kube-apiserver's update: compare the mod revision, else read.
		k := o.key()
		cur, err := o.b.Range(context.Background(), &pb.RangeRequest{Key: k})
		if err != nil {
			o.t.Fatal(err)
		}
		var mod int64
		if len(cur.Kvs) > 0 {
			mod = cur.Kvs[0].ModRevision
		}
		if o.rnd.IntN(3) == 0 {
			mod++ // a stale compare
		}
		o.txn(&pb.TxnRequest{
			Compare: []*pb.Compare{{Key: k, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: mod}}},
			Success: []*pb.RequestOp{putOp(k, fmt.Sprint("u", i), 0), putOp(o.key(), fmt.Sprint("w", i), 0)},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: k}}}},
		})
	case n < 93:
		id := int64(1000 + i)
		for _, s := range o.writers() {
			if _, err := s.Grant(context.Background(), mvcc.LeaseGrant{ID: id, TTL: 3600}); err != nil {
				o.t.Fatal(err)
			}
		}
		o.leases = append(o.leases, id)
	default:
		if len(o.leases) == 0 {
			return
		}
		j := o.rnd.IntN(len(o.leases))
		id := o.leases[j]
		o.leases = append(o.leases[:j], o.leases[j+1:]...)
		for _, s := range o.writers() {
			if _, err := s.Revoke(context.Background(), id); err != nil {
				o.t.Fatal(err)
			}
		}
	}
}

// ranges are the read shapes the apiserver, etcdctl and the tests use.
func (o *indexOps) ranges() []*pb.RangeRequest {
	k1, k2 := o.key(), o.key()
	return []*pb.RangeRequest{
		{Key: k1},
		{Key: k1, KeysOnly: true},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0")},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), Limit: 7},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), Limit: 1000},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), CountOnly: true},
		{Key: k1, RangeEnd: k2, Limit: 3},
		{Key: k1, RangeEnd: []byte{0}},
		{Key: []byte{0}, RangeEnd: []byte{0}, Limit: 5, KeysOnly: true},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_DESCEND, Limit: 4},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), SortTarget: pb.RangeRequest_VALUE, KeysOnly: true, Limit: 4},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), SortTarget: pb.RangeRequest_KEY, SortOrder: pb.RangeRequest_DESCEND, Limit: 2},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), MinModRevision: o.b.Rev() / 2, Limit: 5},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), MaxCreateRevision: o.b.Rev() / 2},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), Revision: o.b.Rev()},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), Revision: max(1, o.b.Rev()-3), Limit: 6},
		{Key: []byte("/k/"), RangeEnd: []byte("/k0"), Revision: o.b.Rev() + 1},
		{Key: []byte("/k0"), RangeEnd: []byte("/k/")},
		{Key: nil},
		{Key: k1, SortOrder: 9},
	}
}

func (o *indexOps) compare() {
	o.t.Helper()
	if len(o.replicas) == 0 {
		o.compareWith(o.a)
		return
	}
	for _, s := range o.replicas {
		o.compareWith(s)
	}
}

// compareWith compares a's reads with b's.
func (o *indexOps) compareWith(a *mvcc.Store) {
	o.t.Helper()
	ctx := context.Background()
	for _, r := range o.ranges() {
		ra, errA := a.Range(ctx, r)
		rb, errB := o.b.Range(ctx, r)
		if (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
			o.t.Fatalf("range %v: errors differ: index %v, sql %v", r, errA, errB)
		}
		if errA != nil {
			continue
		}
		if ra.Rev != rb.Rev || ra.Count != rb.Count || ra.More != rb.More || len(ra.Kvs) != len(rb.Kvs) {
			o.t.Fatalf("range %v: index rev %d count %d more %v len %d; sql rev %d count %d more %v len %d",
				r, ra.Rev, ra.Count, ra.More, len(ra.Kvs), rb.Rev, rb.Count, rb.More, len(rb.Kvs))
		}
		for i := range ra.Kvs {
			if !proto.Equal(ra.Kvs[i], rb.Kvs[i]) {
				o.t.Fatalf("range %v: kv %d: index %v, sql %v", r, i, ra.Kvs[i], rb.Kvs[i])
			}
		}
	}
}

// Every read the live index answers is the answer SQL gives, through random
// puts, deletes, compares, leases and revocations.
// With a value budget of a few values, most keys are cold: their values
// come from the database, for reads and for the writer's prev_kv.
func TestLiveIndexAnswersAsSQL(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			// Seed 3 holds every value; the others a few.
			opts := mvcc.Options{LiveIndexValueBytes: 24}
			if seed == 3 {
				opts = mvcc.Options{}
			}
			o := &indexOps{
				t: t, rnd: rand.New(rand.NewPCG(seed, seed)), keySpace: 40,
				a: openStore(t, opts),
				b: openStore(t, mvcc.Options{DisableLiveIndex: true}),
			}
			if !o.a.IndexEnabled() || o.b.IndexEnabled() {
				t.Fatalf("live index enabled: %v and %v, want true and false", o.a.IndexEnabled(), o.b.IndexEnabled())
			}
			for i := range 600 {
				o.step(i)
				if i%10 == 0 {
					o.compare()
				}
			}
			o.compare()
		})
	}
}

// A store reopened on its file loads the live index from the table; past
// the value budget it holds the rows without their values, and a store
// whose live keys' rows outgrow the budget drops it and keeps answering
// from SQL.
func TestLiveIndexReloadAndBudget(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	open := func(opts mvcc.Options) *mvcc.Store {
		d, err := sqlite.New("sqlite://"+path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := mvcc.Open(ctx, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// A row costs about 133 bytes here: 30 fit in 8 KiB, 80 do not.
	small := mvcc.Options{LiveIndexBytes: 8 << 10}
	s := open(small)
	value := func(i int) []byte { return []byte(fmt.Sprintf("%03d%s", i, strings.Repeat("v", 997))) }
	for i := range 30 {
		put(t, s, fmt.Sprintf("/r/%02d", i), value(i))
	}
	if !s.IndexServing() {
		t.Fatal("live index off with 30 keys' rows in an 8 KiB budget")
	}
	if held := s.IndexValueBytes(); held > 8<<10-30*133 {
		t.Fatalf("the live index holds %d bytes of values, more than its budget leaves", held)
	}
	checkAll := func(s *mvcc.Store, n int) {
		t.Helper()
		res, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/r/"), RangeEnd: []byte("/r0")})
		if err != nil || res.Count != int64(n) || len(res.Kvs) != n {
			t.Fatalf("read /r/: %v, count %d of %d", err, res.Count, n)
		}
		for i, kv := range res.Kvs {
			if string(kv.Value) != string(value(i)) {
				t.Fatalf("read /r/: %s has %.10q..., want %.10q...", kv.Key, kv.Value, value(i))
			}
		}
	}
	checkAll(s, 30)
	for i := 30; i < 80; i++ {
		put(t, s, fmt.Sprintf("/r/%02d", i), value(i))
	}
	if s.IndexEnabled() {
		t.Fatal("live index still on with 80 keys' rows and an 8 KiB budget")
	}
	checkAll(s, 80)
	s.Close()

	s = open(small)
	if s.IndexEnabled() {
		t.Fatal("reopened with 80 keys' rows and an 8 KiB budget, the live index is on")
	}
	s.Close()
	s = open(mvcc.Options{LiveIndexValueBytes: 10 << 10})
	defer s.Close()
	if !s.IndexEnabled() {
		t.Fatal("reopened with the default budget, the live index is off")
	}
	if held := s.IndexValueBytes(); held == 0 || held > 10<<10 || !s.IndexCold("/r/79") {
		t.Fatalf("reloaded with a 10 KiB value budget: %d bytes of values held, /r/79 cold %v", held, s.IndexCold("/r/79"))
	}
	checkAll(s, 80)
	res, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/r/"), RangeEnd: []byte("/r0"), Limit: 10})
	if err != nil || res.Count != 80 || len(res.Kvs) != 10 || !res.More || res.Rev != s.Rev() {
		t.Fatalf("reloaded live index: %v, count %d, %d kvs, more %v, rev %d of %d", err, res.Count, len(res.Kvs), res.More, res.Rev, s.Rev())
	}
	if string(res.Kvs[9].Key) != "/r/09" || res.Kvs[9].Version != 1 {
		t.Fatalf("reloaded live index: 10th key %q version %d", res.Kvs[9].Key, res.Kvs[9].Version)
	}
}

// Past the value budget the values read most recently stay: keys read
// between writes keep theirs while new values that nobody reads come and
// go, and a value written over a cold key is held again.
func TestLiveIndexKeepsReadValues(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, mvcc.Options{LiveIndexValueBytes: 10_000})
	v := []byte(strings.Repeat("x", 1000))
	for i := range 9 {
		put(t, s, fmt.Sprintf("/h/%02d", i), v)
	}
	read := func() {
		t.Helper()
		for i := range 3 {
			res, err := s.Range(ctx, &pb.RangeRequest{Key: fmt.Appendf(nil, "/h/%02d", i)})
			if err != nil || len(res.Kvs) != 1 || string(res.Kvs[0].Value) != string(v) {
				t.Fatalf("read /h/%02d: %v %v", i, err, res)
			}
		}
	}
	read()
	for i := range 40 {
		put(t, s, fmt.Sprintf("/n/%02d", i), v)
		read()
		if held := s.IndexValueBytes(); held > 10_000 {
			t.Fatalf("after %d more values the live index holds %d bytes of values, past its 10,000", i+1, held)
		}
	}
	for i := range 3 {
		if s.IndexCold(fmt.Sprintf("/h/%02d", i)) {
			t.Errorf("/h/%02d, read after every write, lost its value", i)
		}
	}
	cold := 0
	for i := range 40 {
		if s.IndexCold(fmt.Sprintf("/n/%02d", i)) {
			cold++
		}
	}
	if cold < 30 {
		t.Errorf("%d of 40 values nobody read were let go, want at least 30", cold)
	}
	if !s.IndexCold("/n/00") {
		t.Fatal("/n/00 is not cold")
	}
	put(t, s, "/n/00", []byte("again"))
	if s.IndexCold("/n/00") {
		t.Error("/n/00 written again is still cold")
	}
}

// After a commit whose outcome is unknown the live index stops serving and is
// reloaded from the database by the next batch.
func TestLiveIndexReloadsWhenStale(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, mvcc.Options{})
	put(t, s, "/s/a", []byte("1"))
	s.FailCommitOutcome()
	if s.IndexServing() {
		t.Fatal("a stale live index still serves")
	}
	res, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/s/a")})
	if err != nil || len(res.Kvs) != 1 || string(res.Kvs[0].Value) != "1" {
		t.Fatalf("read while stale: %v %v", err, res)
	}
	rev := put(t, s, "/s/b", []byte("2"))
	if !s.IndexServing() {
		t.Fatal("the live index does not serve after the next batch")
	}
	res, err = s.Range(ctx, &pb.RangeRequest{Key: []byte("/s/"), RangeEnd: []byte("/s0")})
	if err != nil || res.Count != 2 || res.Rev != rev {
		t.Fatalf("after reload: %v, count %d, rev %d want %d", err, res.Count, res.Rev, rev)
	}
}

// A second store on the same SQLite file is refused while the first is open:
// each keeps revisions and the live keys in its own memory.
func TestSecondStoreOnOneFileRefused(t *testing.T) {
	ctx := context.Background()
	path := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	open := func() (*mvcc.Store, error) {
		d, err := sqlite.New(path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return mvcc.Open(ctx, d, mvcc.Options{})
	}
	a, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := open(); err == nil {
		b.Close()
		a.Close()
		t.Fatal("a second store opened the same file")
	} else if !strings.Contains(err.Error(), "another QuantyKube server") {
		t.Fatalf("second store: %v", err)
	}
	a.Close()
	b, err := open()
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	b.Close()
}

// A symlink to the database is the same database: the second server is
// refused whichever path it was given.
func TestSecondStoreThroughSymlinkRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	real := filepath.Join(dir, "s.db")
	open := func(path string) (*mvcc.Store, error) {
		d, err := sqlite.New("sqlite://"+path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return mvcc.Open(ctx, d, mvcc.Options{})
	}
	a, err := open(real)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if b, err := open(link); err == nil {
		b.Close()
		t.Fatal("a second store opened the database through a symlink")
	}
}

// A closed store answers no read, not even from its live index.
func TestClosedStoreAnswersNothing(t *testing.T) {
	s := openStore(t, mvcc.Options{})
	put(t, s, "/c/a", []byte("1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte("/c/a")}); err == nil {
		t.Fatal("a closed store answered a read")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
