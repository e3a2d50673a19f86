package replica

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestReplicasIdle: two replicas at rest, a watcher on each, send the
// database nothing: no transaction in its statistics over an idle window.
// Their tailers used to poll it, four statements a second each, to catch
// what the notifications would not bring. Retention's pass (one read per
// rule every --prune-interval) is moved out of the window.
func TestReplicasIdle(t *testing.T) {
	x := framework.Start(t, framework.Postgres, framework.Options{Process: true, Replicas: 2, Args: []string{"--prune-interval", "1h"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range x.Replicas() {
		cli := x.ReplicaClient(t, i)
		r, err := cli.Put(ctx, "/idle/k", "v")
		if err != nil {
			t.Fatal(err)
		}
		wch := cli.Watch(ctx, "/idle/", clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision))
		if wr := <-wch; len(wr.Events) == 0 {
			t.Fatalf("watch through replica %d: %+v", i, wr)
		}
	}

	srv, err := framework.PostgresServer()
	if err != nil {
		framework.Unavailable(t, "PostgreSQL", err)
	}
	// Read from another database: the reads are not counted.
	admin, err := sql.Open("pgx", srv.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	u, err := url.Parse(x.DSN())
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	xacts := func() int64 {
		t.Helper()
		var n int64
		// Each read in a transaction of its own: within one, the
		// statistics stay as they were at its first read.
		err := admin.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Each replica records the revision it applied within serverRenew
	// (10 s) of its moving (status --endpoint's lag), then nothing while
	// it rests: wait for both records before the window.
	store, err := sql.Open("pgx", x.DSN())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		var n int
		err := store.QueryRowContext(ctx, `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%/rev' AND value = (SELECT value FROM meta WHERE name = 'rev')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == x.Replicas() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d replicas recorded the store's revision in 40 s", n, x.Replicas())
		}
	}
	store.Close()
	// A backend reports its counts some time after its transactions, about
	// a second once idle: wait until two reads agree (bounded; a store that
	// never rests fails below).
	before := xacts()
	for range 10 {
		time.Sleep(1500 * time.Millisecond)
		n := xacts()
		if n == before {
			break
		}
		before = n
	}
	const window = 6 * time.Second
	time.Sleep(window)
	if n := xacts() - before; n != 0 {
		t.Fatalf("the database counted %d transactions in %v with both replicas at rest, want none", n, window)
	}
}
