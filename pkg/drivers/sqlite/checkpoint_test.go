package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The writer's connection can stop checkpointing after its commits, and a
// connection of the readers' pool (query_only) can then copy the WAL into
// the database: what the engine does after a large DeleteRange.
func TestCheckpointFromTheReaders(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	d, w, r := openPools(t, path, true)
	size := func() int64 {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	before := size()
	const rows, rowBytes = 2000, 4096 // well past wal_autocheckpoint's pages
	if _, err := w.ExecContext(ctx, `CREATE TABLE t (v BLOB)`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ExecContext(ctx, `INSERT INTO t SELECT ? FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT i FROM n)`, []byte(strings.Repeat("v", rowBytes)), rows); err != nil {
		t.Fatal(err)
	}
	if got := size(); got != before {
		t.Fatalf("the database file grew from %d to %d bytes with wal_autocheckpoint off: the writer checkpointed", before, got)
	}
	if err := d.Checkpoint(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got := size(); got < rows*rowBytes {
		t.Fatalf("after the readers' checkpoint the database file is %d bytes, want at least %d", got, rows*rowBytes)
	}
	// And on again: the writer's own commits checkpoint.
	if err := d.AutoCheckpoint(ctx, w, true); err != nil {
		t.Fatal(err)
	}
	before = size()
	if _, err := w.ExecContext(ctx, `INSERT INTO t SELECT v FROM t`); err != nil {
		t.Fatal(err)
	}
	if got := size(); got <= before {
		t.Fatalf("with wal_autocheckpoint on the database file stayed at %d bytes", got)
	}
}
