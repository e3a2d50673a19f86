package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/mytest"
)

// errCode is err's gRPC code; the client's own deadline counts as
// DeadlineExceeded (a pooler holds a request while it has no server
// connection, where PostgreSQL down refuses it at once).
func errCode(err error) codes.Code {
	if ee, ok := err.(rpctypes.EtcdError); ok {
		return ee.Code()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return codes.DeadlineExceeded
	}
	return status.Code(err)
}

// TestPostgresRestart stops PostgreSQL (immediate: a crash, recovery at the
// next start) under write load and starts it again: requests fail with
// Unavailable meanwhile, nothing acknowledged is lost, the watcher carries
// on without a gap or a duplicate, and no connection leaks.
func TestPostgresRestart(t *testing.T) {
	framework.Run(t, framework.OnPostgres, testDatabaseRestart)
}

// TestMySQLRestart is TestPostgresRestart on MariaDB, killed with SIGKILL
// (InnoDB recovers from its redo log at the next start).
func TestMySQLRestart(t *testing.T) {
	framework.Run(t, []framework.Backend{framework.MySQL}, testDatabaseRestart)
}

// database is the server a backend's store is on, to crash and start.
type database struct {
	name  string
	crash func(context.Context) error
	start func(context.Context) error
	// conns counts the other sessions on the store's database.
	conns func(ctx context.Context, dsn string) (int, error)
}

func databaseOf(t *testing.T, b framework.Backend) database {
	if b == framework.MySQL {
		in := framework.MySQLInstance(t)
		return database{name: "MariaDB", crash: func(context.Context) error { return in.Kill() }, start: in.Start, conns: mysqlConns}
	}
	cluster := framework.PostgresCluster(t)
	return database{name: "PostgreSQL",
		crash: func(ctx context.Context) error { return cluster.Stop(ctx, "immediate") },
		start: cluster.Start, conns: postgresConns}
}

func postgresConns(ctx context.Context, dsn string) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&n)
	return n, err
}

func mysqlConns(ctx context.Context, dsn string) (int, error) {
	db, err := mytest.Connect(dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()`).Scan(&n)
	return n, err
}

func testDatabaseRestart(t *testing.T, b framework.Backend) {
	dbs := databaseOf(t, b)
	x := framework.Start(t, b, framework.Options{Process: true})
	cli := x.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start, err := cli.Get(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	w := collect(ctx, cli, "/w/", start.Header.Revision+1)

	var mu sync.Mutex
	var acks []ack
	errs := map[codes.Code]int{}
	var firstErr error
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && i < 100000; i++ {
				key := fmt.Sprintf("/w/%02d/%05d", g, i)
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				r, err := cli.Put(rctx, key, "v")
				rcancel()
				mu.Lock()
				if err != nil {
					errs[errCode(err)]++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					acks = append(acks, ack{key, r.Header.Revision, mvccpb.PUT})
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acks) }
	time.Sleep(1500 * time.Millisecond)
	before := count()
	sctx, scancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer scancel()
	if err := dbs.crash(sctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	time.Sleep(3 * time.Second)
	duringOutage := count()
	if err := dbs.start(sctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s was down for %v", dbs.name, time.Since(stopped).Round(time.Millisecond))
	// Writes succeed again soon after.
	deadline := time.Now().Add(30 * time.Second)
	for count() < duringOutage+200 {
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume after %s came back (%d acknowledged)", dbs.name, count())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	mu.Lock()
	t.Logf("acknowledged %d writes (%d before the stop, %d by the end of the outage); errors by code: %v; first: %v", len(acks), before, duringOutage, errs, firstErr)
	for c := range errs {
		if c != codes.Unavailable && c != codes.DeadlineExceeded {
			t.Errorf("a write failed with %v (want Unavailable): %v", c, firstErr)
		}
	}
	if len(errs) == 0 {
		t.Errorf("no write failed while %s was down", dbs.name)
	}
	mu.Unlock()

	// Nothing acknowledged is lost, each at its revision.
	var maxRev int64
	for _, a := range acks {
		maxRev = max(maxRev, a.rev)
		r, err := cli.Get(ctx, a.key)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != 1 || r.Kvs[0].ModRevision != a.rev {
			t.Fatalf("acknowledged put of %s at %d: read back %v", a.key, a.rev, r.Kvs)
		}
	}
	evs := w.waitFor(t, "watcher", maxRev, 30*time.Second)
	checkStream(t, "watcher", evs, acks)

	// The store holds a bounded number of connections after the restart.
	n, err := dbs.conns(ctx, x.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("connections of quantykube after the restart: %d", n)
	if n > 10 {
		t.Fatalf("%d connections after the restart: more than the pools allow (8 readers, 1 writer, 1 listener)", n)
	}
}
