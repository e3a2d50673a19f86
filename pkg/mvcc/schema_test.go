package mvcc_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// A downgrade across a schema change is refused at start (docs/upgrades.md),
// and the database is left as it was.
func TestOpenRefusesANewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s := openAt(t, "sqlite://"+path, mvcc.Options{})
	put(t, s, "/k", []byte("v"))
	s.Close()
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.ExecContext(ctx, `UPDATE meta SET value = 4 WHERE name = 'schema'`); err != nil {
		t.Fatal(err)
	}
	if _, err := mvcc.Open(ctx, sqliteDialect(t, "sqlite://"+path), mvcc.Options{}); err == nil || !strings.Contains(err.Error(), "database schema version 4 is newer than this quantykube understands (3): refusing to start") {
		t.Fatalf("open on a newer schema: %v", err)
	}
	var schema, rev int64
	if err := raw.QueryRowContext(ctx, `SELECT (SELECT value FROM meta WHERE name = 'schema'), (SELECT value FROM meta WHERE name = 'rev')`).Scan(&schema, &rev); err != nil || schema != 4 || rev != 2 {
		t.Fatalf("after the refusal: schema %d, revision %d, %v", schema, rev, err)
	}
}
