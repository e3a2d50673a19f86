//go:build linux

package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
)

// A transaction's frames reach the WAL in a few large writes, not two per
// frame, and the readers see every row the moment the commit returns.
func TestWALWritesGathered(t *testing.T) {
	ctx := context.Background()
	d := dialect(t, filepath.Join(t.TempDir(), "g.db"))
	w, r, err := d.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer r.Close()
	defer w.Close()
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
	vfs, err := sqlite.GatheringVFS()
	if err != nil {
		t.Fatal(err)
	}
	w, err := sql.Open("sqlite", "file:"+path+"?vfs="+vfs+"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
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

// A transaction larger than the buffer, with a value larger than one write
// to the file may carry, commits whole and survives a reopen.
func TestWALLargeTransaction(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i % 251)
	}
	func() {
		d := dialect(t, path)
		w, r, err := d.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		defer r.Close()
		defer w.Close()
		if err := d.AutoCheckpoint(ctx, w, false); err != nil {
			t.Fatal(err)
		}
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
	}()
	// A fresh process's view: the file and the WAL left on disk.
	r, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
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
			t.Fatalf("row %d after reopening: %d bytes, differing from the %d written", k, len(got), len(big))
		}
	}
	var check string
	if err := r.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatal(fmt.Sprint("integrity_check: ", check, err))
	}
}
