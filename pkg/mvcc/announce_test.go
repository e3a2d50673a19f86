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
	Announce(context.Context, func() int64)
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
			db.dialect().(serverDialect).Announce(ctx, func() int64 { return 7 })
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

// A server records the revision it has applied beside its row, and the
// first write of a server that starts removes a crashed server's rows
// expired for an hour, its revision's rows with them; an import is
// refused while the server runs (its row, not its revision's rows, is
// what LockImport counts) and allowed once it stopped.
func TestAnnounceRecordsRevisionAndPrunes(t *testing.T) {
	eachBackend(t, replicated, func(t *testing.T, b backend, db *testDB) {
		ctx := t.Context()
		db.open(t, mvcc.Options{}).Close() // the schema
		count := func(q string) int {
			t.Helper()
			var n int
			if err := db.raw.QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		// Expired at 1 ms after the epoch: gone for more than an hour.
		if _, err := db.raw.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES ('server/dead', 1), ('server/dead/rev', 5), ('server/dead/at', 1)`); err != nil {
			t.Fatal(err)
		}
		lockImport := func() error {
			t.Helper()
			tx, err := db.raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			return db.dialect().(mvcc.ReplicaDialect).LockImport(ctx, tx)
		}
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			db.dialect().(serverDialect).Announce(actx, func() int64 { return 7 })
		}()
		eventually(t, "the server's revision recorded", func() bool {
			return count(`SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%/rev' AND value = 7`) == 1 &&
				count(`SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%/at' AND value > 1`) == 1
		})
		if n := count(`SELECT COUNT(*) FROM meta WHERE name LIKE 'server/dead%'`); n != 0 {
			t.Errorf("%d of a crashed server's rows left after a server started", n)
		}
		if err := lockImport(); err == nil {
			t.Error("an import was allowed while a server announced itself")
		}
		cancel()
		<-done
		if n := count(`SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`); n != 0 {
			t.Errorf("%d servers' rows left in meta once Announce returned", n)
		}
		if err := lockImport(); err != nil {
			t.Errorf("an import refused once the server stopped: %v", err)
		}
	})
}
