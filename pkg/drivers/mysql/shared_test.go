package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
)

// A server's row is gone once Announce returns, even when its context
// ended while the first write was still waiting in the database: a stop
// that left that write behind would let it commit after the removal, and
// the row would refuse imports for 30 s. Another session's lock on the
// servers' rows holds the write while the context ends.
func TestAnnounceWithdrawsOnReturn(t *testing.T) {
	dsn := framework.MySQLDatabase(t)
	openReplica(t, dsn).Close() // the schema, and a server's row removed
	db := sqlDB(t, dsn)
	waitServerRows(t, db, 0)

	lock, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(t.Context(), `SELECT name FROM meta WHERE name LIKE 'server/%' FOR UPDATE`); err != nil {
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
		if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE ID <> CONNECTION_ID() AND INFO LIKE '%DUPLICATE KEY UPDATE%'`).Scan(&waiting); err != nil {
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
		// Returned with its write still waiting: the test's check below
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
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d servers' rows left in meta once Announce returned", n)
	}
}
