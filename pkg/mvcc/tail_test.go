package mvcc_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// A replica whose tailer falls behind while another replica prunes the
// history it has not read yet moves on to the retention floor, as etcd
// does past a compaction: a watcher still behind it is told the floor,
// and the replica follows the writes after it. (It used to retry reading
// the pruned revisions forever, its watchers and reads stuck.)
func TestReplicaBehindRetentionMovesOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := framework.PostgresDatabase(t)
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	open := func() *mvcc.Store {
		return openReplica(t, ctx, dialect(t, dsn), mvcc.Options{Now: clock.Now, Retain: mvcc.MinRetain, PruneInterval: time.Hour})
	}
	a, b := open(), open()
	put := func(i int) int64 {
		t.Helper()
		return putKey(t, ctx, a, "/f/k", fmt.Sprint(i), 0)
	}
	waitFor := func(rev int64) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; {
			if got, _, _ := b.Published(); got >= rev {
				return
			}
			if time.Now().After(deadline) {
				got, _, _ := b.Published()
				t.Fatalf("the lagging replica publishes revision %d, want %d", got, rev)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	start, _, _ := b.Published()
	release := b.HoldTailer()
	var rev int64
	// A key written once, in the revisions the lagging replica skips.
	putKey(t, ctx, a, "/f/once", "x", 0)
	for i := range 20 {
		rev = put(i)
		clock.Advance(10 * time.Second)
	}
	if n, err := a.Prune(ctx); err != nil || n == 0 {
		release()
		t.Fatalf("prune: %d rows, %v", n, err)
	}
	floor := a.RetainFloor()
	if floor <= start+1 {
		release()
		t.Fatalf("retention floor %d leaves the lagging replica's next revision %d readable", floor, start+1)
	}
	release()
	waitFor(rev)

	all := mvcc.KeyRange{Key: []byte{}, Unbounded: true}
	_, _, err := b.Events(ctx, start+1, rev, all)
	var below *mvcc.BelowFloorError
	if !errors.As(err, &below) || below.Floor < floor {
		t.Fatalf("a watcher at revision %d on the lagging replica: %v, want the floor %d", start+1, err, floor)
	}
	evs, _, err := b.Events(ctx, floor, rev, all)
	if err != nil || len(evs) != int(rev-floor+1) {
		t.Fatalf("events from the floor %d to %d: %d, %v", floor, rev, len(evs), err)
	}
	next := put(20)
	waitFor(next)
	if evs, _, err := b.Events(ctx, next, next, all); err != nil || len(evs) != 1 || string(evs[0].Kv.Value) != "20" {
		t.Fatalf("the write after the floor on the lagging replica: %v, %v", evs, err)
	}
	// Its live index lacked the skipped changes and was read again.
	if !b.IndexServing() {
		t.Fatal("the lagging replica's live index does not serve")
	}
	r, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("/f/"), RangeEnd: []byte("/f0")})
	if err != nil || len(r.Kvs) != 2 || string(r.Kvs[0].Key) != "/f/k" || string(r.Kvs[0].Value) != "20" || string(r.Kvs[1].Key) != "/f/once" {
		t.Fatalf("the lagging replica lists %v (%v), want /f/k=20 and /f/once", r, err)
	}
}

// A replica follows every change another replica makes to what it mirrors
// (a write, a lease's grant, renewal, revocation and expiry, Compact's
// floor, a retention floor) by notification: the tailers' poll is made an
// hour long, so a change that sends none is never seen.
func TestReplicaFollowsByNotification(t *testing.T) {
	t.Cleanup(mvcc.SetTailPoll(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := framework.PostgresDatabase(t)
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	opts := mvcc.Options{Now: clock.Now, Retain: mvcc.MinRetain, PruneInterval: time.Hour}
	a := openReplica(t, ctx, dialect(t, dsn), opts)
	// b leaves expiry to a: it must learn of it.
	opts.LeaseCheckInterval = time.Hour
	b := openReplica(t, ctx, dialect(t, dsn), opts)
	eventually(t, "a and b listen", func() bool { return a.TailListening() && b.TailListening() })

	follows := func(what string, rev int64) {
		t.Helper()
		eventually(t, "b publishes "+what, func() bool { got, _, _ := b.Published(); return got >= rev })
	}
	knows := func(id int64) bool { return slices.Contains(b.Leases(), id) }

	follows("a's write", putKey(t, ctx, a, "/n/a", "1", 0))

	l, err := a.Grant(ctx, mvcc.LeaseGrant{TTL: 600})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "b knows the lease a granted", func() bool { return knows(l.ID) })
	// b's clock passes the lease's deadline; a renews it (the database's
	// clock decides that it has not expired): b learns the new deadline.
	clock.Advance(time.Hour)
	if info, err := b.TimeToLive(ctx, l.ID, false); err != nil || info.TTL != 0 {
		t.Fatalf("b's lease after its deadline: %+v, %v", info, err)
	}
	if _, err := a.Renew(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b knows the renewal through a", func() bool {
		info, err := b.TimeToLive(ctx, l.ID, false)
		return err == nil && info.TTL > 0
	})
	if _, err := a.Revoke(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b forgets the lease a revoked", func() bool { return !knows(l.ID) })

	// Expiry: a lease of the shortest TTL with a key, past its deadline
	// on the clock a reads and, soon after, on the database's.
	short, err := a.Grant(ctx, mvcc.LeaseGrant{TTL: mvcc.MinLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	attached := putKey(t, ctx, a, "/n/leased", "x", short.ID)
	follows("the leased key", attached)
	eventually(t, "b knows the short lease", func() bool { return knows(short.ID) })
	clock.Advance(time.Hour)
	eventually(t, "b forgets the lease a expired", func() bool { return !knows(short.ID) })
	follows("the expiry", attached+1)
	if r, err := b.Range(ctx, &pb.RangeRequest{Key: []byte("/n/leased")}); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("the expired lease's key on b: %+v, %v", r, err)
	}

	last := putKey(t, ctx, a, "/n/a", "2", 0)
	follows("a's second write", last)
	if _, err := a.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's floor at a's compaction", func() bool { return b.Floor() >= last })

	// Retention: everything so far is older than the window once the
	// clock moves; a prunes and raises its floor.
	clock.Advance(time.Hour)
	follows("a's write after the window", putKey(t, ctx, a, "/n/a", "3", 0))
	if _, err := a.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	floor := a.RetainFloor()
	if floor < last {
		t.Fatalf("a's retention floor %d is below the revision %d the window left behind", floor, last)
	}
	eventually(t, "b's retention floor at a's", func() bool { return b.RetainFloor() >= floor })
}

// While its LISTEN connection is down a replica polls, and misses nothing
// another replica commits meanwhile: PostgreSQL ends the listener's
// session, and its reconnection is kept waiting (blockListen) while the
// other replica writes. With the poll made an hour long, the writes must
// arrive once the listener is back: the reconnection reads what committed
// while nobody listened.
func TestReplicaListenDown(t *testing.T) {
	t.Run("polls", func(t *testing.T) { testListenDown(t, true) })
	t.Run("catches up on reconnection", func(t *testing.T) { testListenDown(t, false) })
}

func testListenDown(t *testing.T, polls bool) {
	if polls {
		t.Cleanup(mvcc.SetTailPoll(100 * time.Millisecond))
	} else {
		t.Cleanup(mvcc.SetTailPoll(time.Hour))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := framework.PostgresDatabase(t)
	a := openReplica(t, ctx, dialect(t, dsn), mvcc.Options{})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", "qk_b")
	u.RawQuery = q.Encode()
	// LogReadBytes 1: b's tailer reads the log one revision at a time, as
	// it does revisions of large values.
	b := openReplica(t, ctx, dialect(t, u.String()), mvcc.Options{LeaseCheckInterval: time.Hour, LogReadBytes: 1})
	eventually(t, "a and b listen", func() bool { return a.TailListening() && b.TailListening() })
	start, _, _ := b.Published()

	// Advisory locks are the database's: the lock is asked for there.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	unblock := blockListen(t, ctx, db)
	defer unblock()
	var ended bool
	err = db.QueryRowContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'qk_b-listen'`, strings.TrimPrefix(u.Path, "/")).Scan(&ended)
	if err != nil || !ended {
		t.Fatalf("end b's LISTEN session: %v, %v", ended, err)
	}
	eventually(t, "b knows its LISTEN connection is lost", func() bool { return !b.TailListening() })
	eventually(t, "b's listener waits to reconnect", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'qk_b-listen' AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n == 1
	})

	var revs []int64
	for i := range 3 {
		revs = append(revs, putKey(t, ctx, a, "/d/k", fmt.Sprint(i), 0))
	}
	l, err := a.Grant(ctx, mvcc.LeaseGrant{TTL: 600})
	if err != nil {
		t.Fatal(err)
	}
	seen := func() bool {
		got, _, _ := b.Published()
		return got >= revs[2] && slices.Contains(b.Leases(), l.ID)
	}
	if polls {
		eventually(t, "b follows a's writes and lease by polling", seen)
		if b.TailListening() {
			t.Fatal("b's tailer listened while its reconnection was blocked")
		}
	}
	unblock()
	eventually(t, "b listens again", b.TailListening)
	eventually(t, "b follows a's writes and lease", seen)
	evs, _, err := b.Events(ctx, start+1, revs[2], mvcc.KeyRange{Key: []byte{}, Unbounded: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, e := range evs {
		got = append(got, e.Kv.ModRevision)
	}
	if !slices.Equal(got, revs) {
		t.Fatalf("b's events since revision %d: %v, want %v", start, got, revs)
	}
	after := putKey(t, ctx, a, "/d/k", "after", 0)
	eventually(t, "b follows a's write after the reconnection", func() bool { got, _, _ := b.Published(); return got >= after })
}

// serveLockID is the advisory lock every QuantyKube listener holds shared
// from before it listens (pkg/drivers/postgres).
const serveLockID = 0x5175616e747953

// blockListen asks for serveLockID exclusively on a session of db and
// leaves the request waiting (the listeners connected hold the lock
// shared): PostgreSQL queues every later request that conflicts with a
// waiting one, so a listener that reconnects waits, not listening, until
// unblock withdraws the request. unblock may be called more than once.
func blockListen(t *testing.T, ctx context.Context, db *sql.DB) (unblock func()) {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(lctx, `SELECT pg_advisory_lock($1)`, int64(serveLockID))
		done <- err
	}()
	var once sync.Once
	unblock = func() {
		once.Do(func() {
			cancel()
			<-done
			// Whatever became of the request, the session's end takes it.
			conn.Raw(func(c any) error { return driver.ErrBadConn })
			conn.Close()
		})
	}
	eventually(t, "the exclusive request waits", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, pid).Scan(&n)
		return err == nil && n == 1
	})
	return unblock
}

func dialect(t *testing.T, dsn string) *postgres.Dialect {
	t.Helper()
	d, err := postgres.New(dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openReplica opens a store on a shared database, closed when t ends.
func openReplica(t *testing.T, ctx context.Context, d mvcc.Dialect, opts mvcc.Options) *mvcc.Store {
	t.Helper()
	s, err := mvcc.Open(ctx, d, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// putKey writes key (attached to lease, unless 0) and returns its revision.
func putKey(t *testing.T, ctx context.Context, s *mvcc.Store, key, value string, lease int64) int64 {
	t.Helper()
	r, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: lease}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// eventually waits for cond, failing the test after 15 s (a bound on a
// stalled replica, not a measure of speed).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 15 s", what)
		}
	}
}
