// Package sqltracetest is the statement-list test's one body, which each
// dialect's tests run on its databases (ADR-039): with every connection
// recorded (sqltrace), a workload runs every path of the engine that
// reaches SQL, and each statement sent must be one the dialect names:
// the engine's (mvcc.Statements), its schema's (Migrations) or its own,
// which the dialect's test lists. A statement built at run time fails it.
package sqltracetest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/internal/sqltrace"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Case is one database the test runs on.
type Case struct {
	// New makes an empty database and returns a maker of dialects on it;
	// each store, or replica, gets a dialect of its own. It is called
	// while the recorder is set.
	New func(t *testing.T) func() mvcc.Dialect
	// Replicas: several stores may open the database at once.
	Replicas bool
	// Own are the statements the dialect sends itself, beside the
	// engine's and the schema's.
	Own []string
	// Made are the statements the dialect writes as it sends them, each a
	// regular expression of the whole text (a batch's rows, a channel's
	// name).
	Made []*regexp.Regexp
	// Split, when set, separates a query of several statements (MySQL's
	// multi-statement queries) into them.
	Split string
}

// driverTx is what a driver sends itself for database/sql's transactions
// (pgx's BEGIN, COMMIT and ROLLBACK): not the dialect's.
var driverTx = regexp.MustCompile(`^(begin( isolation level (serializable|repeatable read|read committed|read uncommitted))?( read (write|only))?|commit|rollback)$`)

// Run records every statement a workload sends through c's dialect and
// fails on any the dialect does not name. It logs the engine's statements
// the workload did not run.
func Run(t *testing.T, c Case) {
	var mu sync.Mutex
	seen := map[string]int{}
	stop := sqltrace.Record(func(q string) {
		mu.Lock()
		seen[q]++
		mu.Unlock()
	})
	defer stop()

	mk := c.New(t)
	st := mk().Statements()
	named := map[string]bool{}
	for _, n := range st.List() {
		named[n.Text] = true
	}
	for _, step := range mk().Migrations() {
		for _, q := range step {
			named[q] = true
		}
	}
	for _, q := range c.Own {
		named[q] = true
	}

	workload(t, c, mk)
	stop()

	mu.Lock()
	defer mu.Unlock()
	allowed := func(q string) bool {
		if named[q] || driverTx.MatchString(q) {
			return true
		}
		for _, re := range c.Made {
			if re.MatchString(q) {
				return true
			}
		}
		return false
	}
	var bad []string
	for q := range seen {
		if allowed(q) {
			continue
		}
		if c.Split != "" && strings.Contains(q, c.Split) {
			parts := strings.Split(q, c.Split)
			if !slices.ContainsFunc(parts, func(p string) bool { return !allowed(p) }) {
				continue
			}
		}
		bad = append(bad, q)
	}
	slices.Sort(bad)
	for _, q := range bad {
		t.Errorf("a statement the dialect does not name was sent (built at run time?):\n%s", q)
	}
	var unrun []string
	ran := 0
	for _, n := range st.List() {
		switch {
		case n.Text == "":
		case seen[n.Text] > 0 || inPacket(seen, n.Text, c.Split):
			ran++
		default:
			unrun = append(unrun, n.Name)
		}
	}
	t.Logf("%d distinct statements sent; %d of the engine's named statements were sent (prepared or run); not sent: %s", len(seen), ran, strings.Join(unrun, ", "))
}

// inPacket reports whether q was sent as a statement of a query of
// several.
func inPacket(seen map[string]int, q, split string) bool {
	if split == "" {
		return false
	}
	for s := range seen {
		if strings.Contains(s, split) && slices.Contains(strings.Split(s, split), q) {
			return true
		}
	}
	return false
}

var quiet = slog.New(slog.DiscardHandler)

// clock is the stores' time, moved by the workload.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func put(k string, v []byte, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: v, Lease: lease}}}
}

func del(k, end string) *pb.RequestOp {
	r := &pb.DeleteRangeRequest{Key: []byte(k), PrevKv: true}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}
}

// workload runs every path of the engine that reaches SQL: writes of
// every kind, Range of every shape at the latest and a past revision
// from SQL, watch catch-up from the log, History's reads and pages,
// leases, Compact, retention and its byte budget, the health checks,
// maintenance, a reopen with the live index, a replica following another
// (where the database takes several), an import, and a revision bump.
func workload(t *testing.T, c Case, mk func() mvcc.Dialect) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	opts := mvcc.Options{Logger: quiet, Now: clk.Now, Retain: mvcc.MinRetain, RetainBytes: 1 << 30,
		PruneInterval: time.Hour, RingBytes: 1, RingKeepBytes: 1, DisableLiveIndex: true}
	open := func(o mvcc.Options) *mvcc.Store {
		t.Helper()
		s, err := mvcc.Open(ctx, mk(), o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	s := open(opts)
	defer func() { s.Close() }()
	txn := func(r *pb.TxnRequest) int64 {
		t.Helper()
		resp, err := s.Txn(ctx, r)
		must("txn", err)
		return resp.Header.Revision
	}
	big := bytes.Repeat([]byte("v"), 70<<10) // past SQLite's inline read of a value
	first := txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("/r/a", []byte("a1"), 0), put("/r/b", []byte("b1"), 0)}})
	// A range of more changes than a narrow one holds (2,048), in
	// requests of etcd's most operations.
	for i := 0; i < 2100; i += mvcc.MaxTxnOps {
		var ops []*pb.RequestOp
		for j := i; j < min(i+mvcc.MaxTxnOps, 2100); j++ {
			ops = append(ops, put(fmt.Sprintf("/w/%05d", j), []byte("w"), 0))
		}
		txn(&pb.TxnRequest{Success: ops})
	}
	clk.advance(time.Second)
	for _, k := range []string{"/r/big", "/w/big", "/z/a", "/z/b"} {
		txn(&pb.TxnRequest{Success: []*pb.RequestOp{put(k, big, 0)}})
	}
	lease, err := s.Grant(ctx, mvcc.LeaseGrant{TTL: 600})
	must("grant", err)
	txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("/r/l", []byte("l"), lease.ID)}})
	past := txn(&pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("/r/a"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: first}}},
		Success: []*pb.RequestOp{put("/r/a", []byte("a2"), 0), put("/r/d/1", []byte("d"), 0), put("/r/d/2", []byte("d"), 0)},
	})
	clk.advance(time.Second)
	txn(&pb.TxnRequest{Success: []*pb.RequestOp{del("/r/b", "")}})
	txn(&pb.TxnRequest{Success: []*pb.RequestOp{del("/r/d/", "/r/d0")}})
	txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("/r/a", []byte("a3"), 0), put("/r/big", big, 0)}})
	head := s.Rev()

	// Range of every shape, from SQL (no live index): the latest revision
	// and a past one, keys only or not, limited or not, counted.
	for _, kr := range []mvcc.KeyRange{{Key: []byte("/r/a")}, {Key: []byte("/r/"), Unbounded: true}, {Key: []byte("/r/"), End: []byte("/r0")}} {
		end := kr.End
		if kr.Unbounded {
			end = []byte{0}
		}
		for _, rev := range []int64{0, past} {
			for _, keysOnly := range []bool{false, true} {
				for _, limit := range []int64{0, 1} {
					for _, count := range []bool{false, true} {
						_, err := s.Range(ctx, &pb.RangeRequest{Key: kr.Key, RangeEnd: end, Revision: rev, KeysOnly: keysOnly, Limit: limit, CountOnly: count})
						must("range", err)
					}
				}
			}
		}
	}
	// Watch catch-up: the ring holds nothing, so the log is read.
	for _, kr := range []mvcc.KeyRange{{Key: []byte("/r/a")}, {Key: []byte("/r/"), Unbounded: true}, {Key: []byte("/r/"), End: []byte("/r0")}} {
		_, _, err := s.Events(ctx, first, head, kr)
		must("events", err)
	}

	// History.
	ms := clk.Now().UnixMilli()
	_, err = s.HistoryFloor(ctx, []byte("/r/a"))
	must("floor", err)
	_, err = s.KeyAt(ctx, []byte("/r/a"), past)
	must("key at", err)
	_, _, err = s.KeyAtTime(ctx, []byte("/r/a"), ms)
	must("key at time", err)
	_, err = s.RevisionAt(ctx, []byte("/r/a"), ms)
	must("revision at", err)
	all := mvcc.PrefixRange(nil)
	_, _, err = s.FirstRevisionFrom(ctx, all, ms-1000, false)
	must("first revision from", err)
	_, err = s.RevisionBefore(ctx, all, ms, false)
	must("revision before", err)
	narrowFrom, narrowBetween := mvcc.KeyRange{Key: []byte("/z/"), Unbounded: true}, mvcc.PrefixRange([]byte("/r/"))
	wideFrom, wideBetween := mvcc.KeyRange{Key: []byte("/w/"), Unbounded: true}, mvcc.PrefixRange([]byte("/w/"))
	ranges := []mvcc.KeyRange{{Key: []byte("/r/a")}, {Key: []byte("/r/big")}, narrowFrom, narrowBetween, wideFrom, wideBetween}
	keep := func([]byte, int64) mvcc.Verdict { return mvcc.Take }
	for _, kr := range ranges {
		for _, limit := range []int{10, 100, 600} {
			_, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: limit, MaxBytes: 64 << 20})
			must("log", err)
			for _, desc := range []bool{false, true} {
				_, err := s.Log(ctx, mvcc.LogQuery{Range: kr, Limit: limit, MaxBytes: 64 << 20, Descending: desc, Keep: keep})
				must("log scan", err)
			}
		}
	}
	for _, kr := range []mvcc.KeyRange{{Key: []byte("/r/a")}, wideFrom, wideBetween} {
		for _, limit := range []int{10, 100, 1000} {
			_, err := s.RangeAt(ctx, mvcc.RangeAtQuery{Range: kr, Rev: head, Limit: limit, MaxBytes: 64 << 20})
			must("range at", err)
		}
	}
	must("usage", s.Usage(ctx, ms, func(mvcc.KeyUsage) error { return nil }))

	// Leases: renewed, read with their keys, revoked, and one expiring.
	_, err = s.Renew(ctx, lease.ID)
	must("renew", err)
	_, err = s.TimeToLive(ctx, lease.ID, true)
	must("time to live", err)
	_, err = s.Revoke(ctx, lease.ID)
	must("revoke", err)
	short, err := s.Grant(ctx, mvcc.LeaseGrant{TTL: mvcc.MinLeaseTTL})
	must("grant", err)
	expired := txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("/r/s", []byte("s"), short.ID)}}) + 1
	clk.advance(time.Hour)
	waitRev(t, s, expired)

	// Compact, retention and its byte budget, a rule of its own included.
	_, err = s.Compact(ctx, s.Rev())
	must("compact", err)
	clk.advance(2 * mvcc.MinRetain)
	txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("/r/a", []byte("a4"), 0)}})
	_, err = s.Prune(ctx)
	must("prune", err)

	must("check database", s.CheckDatabase(ctx))
	must("check schema", s.CheckSchema(ctx))
	_, _, err = s.DBSize(ctx)
	must("size", err)
	must("defragment", s.Defragment(ctx))
	// The alarms, as the quota and etcd's Alarm RPC change them.
	_, err = s.ActivateAlarm(ctx, s.MemberID(), pb.AlarmType_NOSPACE)
	must("activate alarm", err)
	_, err = s.DeactivateAlarm(ctx, s.MemberID(), pb.AlarmType_NOSPACE)
	must("deactivate alarm", err)
	must("close", s.Close())

	// Again with the live index, which loads the live keys, and a range
	// delete that goes by range where the index lists its keys.
	opts.DisableLiveIndex = false
	s = open(opts)
	txn(&pb.TxnRequest{Success: []*pb.RequestOp{del("/w/", "/w0"), put("/r/a", []byte("a5"), 0)}})
	if c.Replicas {
		// Another replica follows it.
		b := open(opts)
		defer b.Close()
		rev := txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("/r/a", []byte("a6"), 0)}})
		waitRev(t, b, rev)
		_, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("/r/a")})
		must("replica range", err)
	}
	must("close", s.Close())

	// An import into a new database, opened once it ended.
	fresh := c.New(t)
	im, err := mvcc.BeginImport(ctx, fresh(), mvcc.ImportOptions{Logger: quiet})
	must("begin import", err)
	must("import put", im.Put(&mvccpb.KeyValue{Key: []byte("/i/a"), Value: []byte("i"), CreateRevision: 3, ModRevision: 4, Version: 2, Lease: 9}))
	must("import lease", im.Lease(9, 600))
	_, err = im.Commit(5)
	must("import commit", err)
	imported, err := mvcc.Open(ctx, fresh(), mvcc.Options{Logger: quiet})
	must("open the import", err)
	must("close", imported.Close())

	// A revision bump, as a restore does.
	d := fresh()
	w, r, err := d.Open(ctx)
	must("open", err)
	defer r.Close()
	defer w.Close()
	tx, err := w.BeginTx(ctx, nil)
	must("begin", err)
	must("bump", mvcc.BumpRevision(ctx, tx, d, 100))
	must("rollback", tx.Rollback())
	if closer, ok := d.(interface{ Close() error }); ok {
		defer closer.Close()
	}
}

// waitRev waits until s has published rev (a replica's tailer, a lease's
// expiry): a bound on a stalled store, not a measure of speed.
func waitRev(t *testing.T, s *mvcc.Store, rev int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Rev() < rev; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the store is at revision %d, not %d, after 30 s", s.Rev(), rev)
		}
	}
}
