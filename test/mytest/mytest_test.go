package mytest_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/quantyroot/quantykube/test/mytest"
)

// TestThrowawayInstance starts a server, makes a database on it, kills the
// server as a crash would and starts it again.
func TestThrowawayInstance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := mytest.Open(ctx)
	if err != nil {
		t.Skip(err)
	}
	defer srv.Close()
	dsn, err := mytest.CreateDatabase(ctx, srv.AdminDSN, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dsn)
	db, err := sql.Open("mysql", "qk@tcp("+u.Host+")"+u.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("server %s, database %s", version, strings.TrimPrefix(u.Path, "/"))
	if srv.Instance == nil {
		return
	}
	if err := srv.Instance.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Instance.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mytest.DropDatabase(ctx, srv.AdminDSN, dsn); err != nil {
		t.Fatal(err)
	}
}

// TestCommitSeenOnlyOnceDurable: on the throwaway server, a value another
// session has read survives a crash of the server. Writers commit an
// increment in a loop while a reader notes the highest value it reads;
// the server is killed, started again, and the durable value must be at
// least what was read. MariaDB makes a commit visible before its redo is
// flushed unless the binary log is synced at each commit (sync_binlog =
// 1, which Start sets): without it, 29 of 30 rounds here read a value the
// crash then lost (docs/mysql.md). The chaos suite's MariaDB rows rely
// on it, as QuantyKube's replicas send what they read to watchers.
func TestCommitSeenOnlyOnceDurable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := mytest.Open(ctx)
	if err != nil {
		t.Skip(err)
	}
	defer srv.Close()
	if srv.Instance == nil {
		t.Skipf("%s names a server this test may not kill", mytest.EnvDSN)
	}
	dsn, err := mytest.CreateDatabase(ctx, srv.AdminDSN, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	db, err := mytest.Connect(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE c (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO c VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for round := range 5 {
		seen, durable := seenThenCrash(ctx, t, srv.Instance, dsn, time.Duration(300+100*round)*time.Millisecond)
		t.Logf("round %d: read %d, durable %d", round, seen, durable)
		if seen > durable {
			t.Errorf("round %d: a reader saw %d, the crash left %d", round, seen, durable)
		}
	}
}

// seenThenCrash runs four writers and a reader for d, kills the server,
// starts it, and returns the highest value read and the durable one.
func seenThenCrash(ctx context.Context, t *testing.T, in *mytest.Instance, dsn string, d time.Duration) (seen, durable int64) {
	db, err := mytest.Connect(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for lctx.Err() == nil {
				db.ExecContext(lctx, `UPDATE c SET n = n + 1 WHERE id = 1`)
			}
		})
	}
	var high atomic.Int64
	wg.Go(func() {
		for lctx.Err() == nil {
			var n int64
			if db.QueryRowContext(lctx, `SELECT n FROM c WHERE id = 1`).Scan(&n) == nil && n > high.Load() {
				high.Store(n)
			}
		}
	})
	time.Sleep(d)
	if err := in.Kill(); err != nil {
		t.Fatal(err)
	}
	stop()
	wg.Wait()
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	db2, err := mytest.Connect(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if err := db2.QueryRowContext(ctx, `SELECT n FROM c WHERE id = 1`).Scan(&durable); err != nil {
		t.Fatal(err)
	}
	return high.Load(), durable
}
