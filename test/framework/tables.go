package framework

import (
	"bytes"
	"context"
	"database/sql"
	"testing"
)

// CheckTables replays a store's log, read through db (the test's own
// connection to its database), and compares it with current and meta:
// revisions have no holes, and each live key's current row is its last
// change's. Its statements are SQLite's, PostgreSQL's and MySQL's alike.
func CheckTables(t testing.TB, db *sql.DB) {
	t.Helper()
	ctx := context.Background()
	var metaRev, maxRev, distinct int64
	if err := db.QueryRowContext(ctx, `SELECT (SELECT value FROM meta WHERE name = 'rev'), MAX(rev), COUNT(DISTINCT rev) FROM log`).Scan(&metaRev, &maxRev, &distinct); err != nil {
		t.Fatal(err)
	}
	if maxRev != metaRev || distinct != metaRev-1 {
		t.Errorf("meta.rev %d, log revisions up to %d, %d distinct: want contiguous 2..meta.rev", metaRev, maxRev, distinct)
	}
	type cur struct {
		value                       []byte
		create, mod, version, lease int64
	}
	want := map[string]cur{}
	rows, err := db.QueryContext(ctx, `SELECT l.key, l.value, l.create_rev, l.rev, l.version, l.lease, l.deleted FROM log l ORDER BY l.rev, l.sub`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k []byte
		var c cur
		var deleted int16
		if err := rows.Scan(&k, &c.value, &c.create, &c.mod, &c.version, &c.lease, &deleted); err != nil {
			t.Fatal(err)
		}
		if deleted == 1 {
			if c.value != nil {
				t.Errorf("delete of %q at %d has a value %q, want NULL", k, c.mod, c.value)
			}
			delete(want, string(k))
			continue
		}
		want[string(k)] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	got := map[string]cur{}
	rows, err = db.QueryContext(ctx, `SELECT c.key, l.value, c.create_rev, c.mod_rev, c.version, c.lease FROM current c LEFT JOIN log l ON l.key = c.key AND l.rev = c.mod_rev`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k []byte
		var c cur
		if err := rows.Scan(&k, &c.value, &c.create, &c.mod, &c.version, &c.lease); err != nil {
			t.Fatal(err)
		}
		got[string(k)] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("current has %d keys, the log replays to %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || !bytes.Equal(g.value, w.value) || g.create != w.create || g.mod != w.mod || g.version != w.version || g.lease != w.lease {
			t.Errorf("current[%q] = %+v (present %v), log says %+v", k, g, ok, w)
		}
	}
}
