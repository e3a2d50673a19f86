//go:build linux

package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
)

// openGathering opens path in WAL mode through the gathering VFS, with
// pragmas, until the test ends.
func openGathering(t *testing.T, path string, pragmas ...string) *sql.DB {
	t.Helper()
	vfs, err := sqlite.GatheringVFS()
	if err != nil {
		t.Fatal(err)
	}
	dsn := "file:" + path + "?vfs=" + vfs + "&_pragma=journal_mode(WAL)"
	for _, p := range pragmas {
		dsn += "&_pragma=" + p
	}
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// A transaction's frames reach the WAL in a few large writes, not two per
// frame, and the readers see every row the moment the commit returns.
func TestWALWritesGathered(t *testing.T) {
	ctx := context.Background()
	_, w, r := openPools(t, filepath.Join(t.TempDir(), "g.db"), false)
	if _, err := w.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	sqliteBefore, fileBefore := sqlite.WALWrites()
	const rows = 200
	for batch := range 4 {
		tx, err := w.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range rows / 4 {
			k := batch*rows/4 + i
			if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (?, ?)`, k, bytes.Repeat([]byte{byte(k)}, 1024)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := r.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := (batch + 1) * rows / 4; n != want {
			t.Fatalf("after commit %d the readers see %d rows, want %d", batch+1, n, want)
		}
	}
	sqliteAfter, fileAfter := sqlite.WALWrites()
	bySQLite, toFile := sqliteAfter-sqliteBefore, fileAfter-fileBefore
	t.Logf("%d writes by SQLite, %d to the file", bySQLite, toFile)
	if bySQLite < 2*rows/4 {
		t.Fatalf("SQLite wrote the WAL %d times for %d rows of 1 KiB: the writer does not use the gathering VFS", bySQLite, rows)
	}
	if toFile*10 > bySQLite {
		t.Fatalf("%d of SQLite's %d WAL writes reached the file one by one, want a tenth or fewer", toFile, bySQLite)
	}
}

// With synchronous=NORMAL a commit does not sync the WAL, so the frames
// must reach the file before the wal-index header names them
// (xShmBarrier): a connection of SQLite's own VFS reads them at once.
func TestWALFramesReachTheFileBeforeTheHeader(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "n.db")
	w := openGathering(t, path, "synchronous(NORMAL)")
	w.SetMaxOpenConns(1)
	if _, err := w.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	r, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, fileBefore := sqlite.WALWrites()
	for i := range 50 {
		v := bytes.Repeat([]byte{byte(i)}, 3000)
		if _, err := w.ExecContext(ctx, `INSERT INTO t VALUES (?, ?)`, i, v); err != nil {
			t.Fatal(err)
		}
		var n int
		var got []byte
		if err := r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM t), v FROM t WHERE k = ?`, i).Scan(&n, &got); err != nil {
			t.Fatalf("read after commit %d: %v", i+1, err)
		}
		if n != i+1 || !bytes.Equal(got, v) {
			t.Fatalf("after commit %d another connection sees %d rows and a value of %d bytes, want %d rows and the value written", i+1, n, len(got), i+1)
		}
	}
	if _, fileAfter := sqlite.WALWrites(); fileAfter == fileBefore {
		t.Fatal("no WAL write went through the gathering VFS")
	}
}

// A transaction larger than the buffer, with values larger than one write
// to the file may carry, commits whole, and a copy of the database and its
// WAL taken after the commit recovers it from the WAL.
func TestWALLargeTransaction(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	copied := filepath.Join(t.TempDir(), "copy.db")
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i % 251)
	}
	func() {
		_, w, _ := openPools(t, path, true)
		if _, err := w.ExecContext(ctx, `CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)`); err != nil {
			t.Fatal(err)
		}
		tx, err := w.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (?, ?)`, k, big); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit of 9 MiB: %v", err)
		}
		// What a power cut now would leave: no checkpoint has run.
		for _, suffix := range []string{"", "-wal"} {
			b, err := os.ReadFile(path + suffix)
			if err != nil {
				t.Fatal(err)
			}
			if suffix == "-wal" && len(b) < 3*len(big) {
				t.Fatalf("the WAL is %d bytes after a commit of %d", len(b), 3*len(big))
			}
			if err := os.WriteFile(copied+suffix, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}()
	r, err := sql.Open("sqlite", "file:"+copied)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for k := range 3 {
		var got []byte
		if err := r.QueryRowContext(ctx, `SELECT v FROM t WHERE k = ?`, k).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, big) {
			t.Fatalf("row %d recovered from the WAL: %d bytes, differing from the %d written", k, len(got), len(big))
		}
	}
	var check string
	if err := r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatal(fmt.Sprint("integrity_check: ", check, err))
	}
}

// A write that fails while the frames wait in the buffer loses none of
// them: SQLite was told they were written. Here pages spill to the WAL in
// the middle of a transaction (a cache of 20 pages), a statement that
// reads them back fails to flush them, SQLite rolls back that statement
// only, and the transaction goes on to commit.
func TestWALFailedFlushKeepsTheFrames(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "f.db")
	w := openGathering(t, path, "synchronous(FULL)", "cache_size(20)")
	conn, err := w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string) error {
		_, err := conn.ExecContext(ctx, q)
		return err
	}
	for _, q := range []string{
		`CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)`,
		`BEGIN IMMEDIATE`,
		`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2000) INSERT INTO t SELECT i, randomblob(1000) FROM c`,
	} {
		if err := exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	stop := sqlite.FailWALWrites()
	err = exec(`UPDATE t SET v = zeroblob(1000) WHERE k % 7 = 0`)
	stop()
	if err == nil {
		t.Fatal("the update succeeded with every write to the WAL failing: nothing was flushed, and the test proves nothing")
	}
	t.Logf("the update, its flush failing: %v", err)
	for _, q := range []string{`INSERT INTO t VALUES (5000, x'01')`, `COMMIT`} {
		if err := exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var check string
	var n, zeroed int
	if err := r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check after the commit: %.200q, %v", check, err)
	}
	if err := r.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE v = zeroblob(1000)) FROM t`).Scan(&n, &zeroed); err != nil {
		t.Fatal(err)
	}
	if n != 2001 || zeroed != 0 {
		t.Fatalf("after the commit: %d rows, %d of them updated; want 2001 and none (the update failed)", n, zeroed)
	}
}
