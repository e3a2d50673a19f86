package mvcc_test

import (
	"context"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/mvcc"
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
	eachBackend(t, replicated, func(t *testing.T, b backend, db *testDB) {
		db.open(t, mvcc.Options{}).Close() // the schema
		count := func(q string) int {
			t.Helper()
			var n int
			if err := db.raw.QueryRowContext(t.Context(), q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		const servers = `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`
		if n := count(servers); n != 0 {
			t.Fatalf("%d servers' rows in meta once the store closed", n)
		}

		lock, err := db.raw.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Rollback()
		if _, err := lock.ExecContext(t.Context(), db.holdServers); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			db.dialect().(serverDialect).Announce(ctx)
		}()
		eventually(t, "Announce's first write waiting in the database", func() bool { return count(db.serversWaiting) > 0 })
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
		// A write left behind runs as soon as the lock is gone.
		eventually(t, "no write of a server's row running", func() bool { return count(db.serversWaiting) == 0 })
		if n := count(servers); n != 0 {
			t.Fatalf("%d servers' rows left in meta once Announce returned", n)
		}
	})
}
