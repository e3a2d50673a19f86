package mvcc_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/mytest"
)

// serverDialect is a dialect that announces its servers (ReplicaDialect).
type serverDialect interface {
	mvcc.Dialect
	Announce(context.Context)
}

// A server's row in meta is gone once Announce returns, even when its
// context ended while the first write was still waiting in the database:
// a stop that left that write behind would let it commit after the
// removal, and the row would refuse imports for 30 s. Another session's
// lock holds the write while the context ends.
func TestAnnounceWithdrawsOnReturn(t *testing.T) {
	for _, b := range []struct {
		name string
		open func(t *testing.T) (serverDialect, *sql.DB)
		// hold is run in the test's transaction to make the servers'
		// rows' writes wait; waiting counts the other sessions' writes
		// of a server row that wait.
		hold, waiting string
	}{{
		name: "postgres",
		open: func(t *testing.T) (serverDialect, *sql.DB) {
			dsn := framework.PostgresDatabase(t)
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return dialect(t, dsn), db
		},
		hold: `LOCK TABLE meta IN SHARE MODE`,
		waiting: `SELECT COUNT(*) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO meta%'`,
	}, {
		name: "mysql",
		open: func(t *testing.T) (serverDialect, *sql.DB) {
			dsn := framework.MySQLDatabase(t)
			db, err := mytest.Connect(dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			d, err := mysql.New(dsn, mysql.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d, db
		},
		hold: `SELECT name FROM meta WHERE name LIKE 'server/%' FOR UPDATE`,
		waiting: `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE ID <> CONNECTION_ID() AND INFO LIKE '%INSERT INTO meta%'`,
	}} {
		t.Run(b.name, func(t *testing.T) {
			d, db := b.open(t)
			openReplica(t, t.Context(), d, mvcc.Options{}).Close() // the schema
			servers := func() int {
				t.Helper()
				var n int
				if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := servers(); n != 0 {
				t.Fatalf("%d servers' rows in meta once the store closed", n)
			}

			lock, err := db.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback()
			if _, err := lock.ExecContext(t.Context(), b.hold); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				d.Announce(ctx)
			}()
			eventually(t, "Announce's first write waiting in the database", func() bool {
				var n int
				if err := db.QueryRowContext(t.Context(), b.waiting).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n > 0
			})
			cancel()
			select {
			case <-done:
				// Returned with its write still waiting: the check below
				// sees whether that write lands after the removal.
			case <-time.After(time.Second):
			}
			if err := lock.Commit(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("Announce did not return within 15 s of its context's end")
			}
			// A write left behind commits as soon as the lock is gone.
			time.Sleep(500 * time.Millisecond)
			if n := servers(); n != 0 {
				t.Fatalf("%d servers' rows left in meta once Announce returned", n)
			}
		})
	}
}
