package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	msqlite "modernc.org/sqlite"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
)

// TestReaderCacheStaysSmall reads a table many times the size of SQLite's
// default page cache on three reader connections at once, and checks that
// their caches and the writer's hold no more than their sizes. The
// bound is on their sum: modernc.org/sqlite's SQLite keeps one pool of
// pages for all connections, and a connection at its own limit takes the
// least recently used page of any other, in the whole process: the test
// relies on this package's other tests closing their connections, and
// must not run in parallel with them. A bigger cache is freed and faulted
// in again after every commit (see readerCacheKiB).
func TestReaderCacheStaysSmall(t *testing.T) {
	d, err := New("sqlite://"+filepath.Join(t.TempDir(), "state.db"), Options{Pool: generic.ConnectionPoolConfig{MaxOpen: 4}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	writer, reader, err := d.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		reader.Close()
		writer.Close()
		d.Close()
	})
	// 6,000 rows of 3,000 bytes: a page each, 23 MiB of pages.
	const rows, size = 6000, 3000
	if _, err := writer.ExecContext(ctx, `CREATE TABLE t (v BLOB)`); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO t SELECT randomblob(?) FROM n`, rows, size); err != nil {
		t.Fatal(err)
	}
	cacheUsed := func(conn *sql.Conn) int {
		var used int
		if err := conn.Raw(func(dc any) (err error) {
			used, _, err = dc.(msqlite.DBStatus).Status(msqlite.DBStatusCacheUsed, false)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return used
	}
	// Connections held at once are distinct connections.
	w, err := writer.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	conns := []*sql.Conn{w}
	for i := range 3 {
		conn, err := reader.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
		var n int64
		if err := conn.QueryRowContext(ctx, `SELECT sum(length(v)) FROM t`).Scan(&n); err != nil || n != rows*size {
			t.Fatalf("reader %d read %d bytes (%v), want %d", i, n, err, rows*size)
		}
	}
	total := 0
	for _, c := range conns {
		total += cacheUsed(c)
	}
	// The writer keeps SQLite's default. The cache's bytes count each
	// page's header and SQLite's own per-page data besides the page: a
	// tenth or so.
	const writerCacheKiB = 2000
	kib := writerCacheKiB + (len(conns)-1)*readerCacheKiB
	if limit := kib << 10 * 5 / 4; total > limit || total < readerCacheKiB<<10 {
		t.Errorf("the page caches of a writer and %d readers hold %d bytes after three reads of %d MiB, want at most %d (%d KiB, %d KiB for each reader)", len(conns)-1, total, rows*size>>20, limit, kib, readerCacheKiB)
	}
}
