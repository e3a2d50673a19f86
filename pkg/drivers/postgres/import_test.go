package postgres_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"

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
