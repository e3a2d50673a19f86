package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
)

// A server's row is gone once Announce returns, even when its context
// ended while the first write was still waiting in the database: a stop
// that left that write behind would let it commit after the removal, and
// the row would refuse imports for 30 s. Another session's lock on meta
// holds the write while the context ends.
func TestAnnounceWithdrawsOnReturn(t *testing.T) {
	dsn := framework.PostgresDatabase(t)
	openReplica(t, dsn).Close() // the schema
	db := sqlDB(t, dsn)

	lock, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(t.Context(), `LOCK TABLE meta IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		dialectFor(t, dsn).Announce(ctx)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var waiting int
		if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO meta%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Announce's first write did not reach the database within 10 s")
		}
	}
	cancel()
	select {
	case <-done:
		// Returned with its write still waiting: the check below sees
		// whether that write lands after the removal.
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
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d servers' rows left in meta once Announce returned", n)
	}
}
