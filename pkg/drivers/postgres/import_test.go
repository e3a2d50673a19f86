package postgres_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

var quiet = slog.New(slog.DiscardHandler)

func dialectFor(t *testing.T, dsn string) *postgres.Dialect {
	t.Helper()
	d, err := postgres.New(dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// sqlDB is a plain connection to dsn, closed when t ends: the test's own
// look at the database, beside the store's sessions.
func sqlDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func tables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// A database that holds another program's tables (kine's, when --endpoint
// names kine's database or the source) is refused before the import
// writes anything to it: no QuantyKube table appears beside kine's.
func TestImportRefusesAForeignDatabase(t *testing.T) {
	dsn := framework.PostgresDatabase(t)
	db := sqlDB(t, dsn)
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE kine (id BIGSERIAL PRIMARY KEY, name TEXT)`); err != nil {
		t.Fatal(err)
	}
	im, err := mvcc.BeginImport(t.Context(), dialectFor(t, dsn), mvcc.ImportOptions{Logger: quiet})
	if err == nil {
		im.Close()
		t.Fatal("import into kine's database: no error")
	}
	if !strings.Contains(err.Error(), "holds tables that are not QuantyKube's (kine)") {
		t.Errorf("import into kine's database: %v", err)
	}
	if got := tables(t, db); len(got) != 1 || got[0] != "kine" {
		t.Errorf("tables after the refused import: %v, want only kine", got)
	}
}

// waitServeLock waits until a server's LISTEN connection holds the lock
// imports check (it takes it as it connects, after Open has returned), or
// with held false until no session does (a closed session's backend lets
// go as it exits, just after the client closed it).
func waitServeLock(t *testing.T, db *sql.DB, held bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.mode = 'ShareLock' AND l.granted AND a.datname = current_database()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) == held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s on, %d sessions hold the serve lock", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An import is refused while a server is connected to the database, and
// runs once it has stopped; a server is refused while the import runs.
func TestImportRefusesWhileServed(t *testing.T) {
	dsn := framework.PostgresDatabase(t)
	s, err := mvcc.Open(t.Context(), dialectFor(t, dsn), mvcc.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := sqlDB(t, dsn)
	waitServeLock(t, db, true)
	im, err := mvcc.BeginImport(t.Context(), dialectFor(t, dsn), mvcc.ImportOptions{Logger: quiet})
	if err == nil {
		im.Close()
		t.Fatal("import into a served database: no error")
	}
	if !strings.Contains(err.Error(), "a QuantyKube server is connected to") {
		t.Errorf("import into a served database: %v", err)
	}
	s.Close()
	waitServeLock(t, db, false)
	im, err = mvcc.BeginImport(t.Context(), dialectFor(t, dsn), mvcc.ImportOptions{Logger: quiet})
	if err != nil {
		t.Fatalf("import once the server stopped: %v", err)
	}
	// A server opening the store during the import would serve it empty.
	if s, err := mvcc.Open(t.Context(), dialectFor(t, dsn), mvcc.Options{Logger: quiet}); err == nil {
		s.Close()
		im.Close()
		t.Fatal("a server opened the store during an import")
	} else if !strings.Contains(err.Error(), "an import into") {
		t.Errorf("a server opening the store during an import: %v", err)
	}
	im.Close()
	s, err = mvcc.Open(t.Context(), dialectFor(t, dsn), mvcc.Options{Logger: quiet})
	if err != nil {
		t.Fatalf("a server once the import ended: %v", err)
	}
	s.Close()
}

// An imported lease's deadline starts when a server first opens the store,
// not at the import (docs/import.md): a lease shorter than the pause
// between the two is alive at the start, with its key, and it is started
// once, not at every open.
func TestImportedLeasesStartAtOpen(t *testing.T) {
	ctx := t.Context()
	dsn := framework.PostgresDatabase(t)
	const ttl = 3
	im, err := mvcc.BeginImport(ctx, dialectFor(t, dsn), mvcc.ImportOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	key := []byte("/registry/events/default/e")
	if err := im.Put(&mvccpb.KeyValue{Key: key, Value: []byte("ev"), CreateRevision: 5, ModRevision: 5, Version: 1, Lease: 7}); err != nil {
		t.Fatal(err)
	}
	if err := im.Lease(7, ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := im.Commit(10); err != nil {
		t.Fatal(err)
	}
	time.Sleep((ttl + 1) * time.Second)

	s, err := mvcc.Open(ctx, dialectFor(t, dsn), mvcc.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, err := s.TimeToLive(ctx, 7, true)
	if err != nil || info.TTL < ttl-1 || len(info.Keys) != 1 {
		t.Fatalf("lease 7 at the first start, %d s after the import: %+v, %v; want about %d s left and its key", ttl+1, info, err, ttl)
	}
	res, err := s.Range(ctx, &pb.RangeRequest{Key: key})
	if err != nil || len(res.Kvs) != 1 {
		t.Fatalf("the lease's key at the start: %v, %v", res, err)
	}
	var marks int
	if err := sqlDB(t, dsn).QueryRowContext(ctx, `SELECT COUNT(*) FROM meta WHERE name LIKE 'imported_leases%'`).Scan(&marks); err != nil || marks != 0 {
		t.Errorf("the import's lease mark after the first start: %d, %v; want it gone", marks, err)
	}
}

// relationSize is the size of a table's rows as another session sees
// it: rows an open transaction has sent take room before they commit.
func relationSize(t *testing.T, db *sql.DB, table string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(t.Context(), `SELECT pg_relation_size($1)`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// An import sends its rows in chunks, not all at the commit: once it holds
// importChunkRows (4096) rows, or 16 MiB of keys and values, it writes them
// into its transaction. Everything arrives, across the chunks.
func TestImportFlushesChunks(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		name       string
		keys       int
		value      []byte
		firstChunk int // the Put that sends the first chunk
	}{
		{"rows", 4096 + 100, []byte("v"), 4096},
		// A value is counted once (only its log row holds it), a key
		// twice: three 6 MiB values pass 16 MiB, two do not.
		{"bytes", 4, bytes.Repeat([]byte("b"), 6<<20), 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := framework.PostgresDatabase(t)
			db := sqlDB(t, dsn)
			im, err := mvcc.BeginImport(ctx, dialectFor(t, dsn), mvcc.ImportOptions{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer im.Close()
			for i := range c.keys {
				if i+1 == c.firstChunk && relationSize(t, db, "log") != 0 {
					t.Fatalf("rows were sent before the chunk was full (%d keys held)", i)
				}
				kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/k/%05d", i), Value: c.value, CreateRevision: int64(i + 2), ModRevision: int64(i + 2), Version: 1}
				if err := im.Put(kv); err != nil {
					t.Fatal(err)
				}
				if i+1 == c.firstChunk && relationSize(t, db, "log") == 0 {
					t.Fatalf("%d keys held and nothing sent: the chunk was not flushed", i+1)
				}
			}
			rev := int64(c.keys + 1)
			if _, err := im.Commit(rev); err != nil {
				t.Fatal(err)
			}
			var rows, cur int64
			var total int64
			err = db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM log), (SELECT COUNT(*) FROM current), (SELECT COALESCE(SUM(length(l.value)), 0) FROM current c JOIN log l ON l.key = c.key AND l.rev = c.mod_rev)`).Scan(&rows, &cur, &total)
			if err != nil || rows != int64(c.keys) || cur != int64(c.keys) || total != int64(c.keys*len(c.value)) {
				t.Errorf("after the import: %d log rows, %d current rows, %d value bytes, %v; want %d, %d, %d", rows, cur, total, err, c.keys, c.keys, c.keys*len(c.value))
			}
			s, err := mvcc.Open(ctx, dialectFor(t, dsn), mvcc.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			res, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/k/"), RangeEnd: []byte("/k0"), CountOnly: true})
			if err != nil || res.Count != int64(c.keys) || res.Rev != rev {
				t.Errorf("served after the import: %v, %v; want %d keys at revision %d", res, err, c.keys, rev)
			}
		})
	}
}
