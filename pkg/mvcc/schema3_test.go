package mvcc_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// Dialects stopped at schema version 2, whose current table still has a
// value column: a store as a binary of that version created it.
type sqliteSchema2 struct{ *sqlite.Dialect }

func (d sqliteSchema2) Migrations() [][]string { return d.Dialect.Migrations()[:2] }

type postgresSchema2 struct{ *postgres.Dialect }

func (d postgresSchema2) Migrations() [][]string { return d.Dialect.Migrations()[:2] }

// storeDB is one empty database, run by either dialect.
type storeDB struct {
	// dialect opens it at the newest schema, or at schema 2.
	dialect func(t *testing.T, schema2 bool) mvcc.Dialect
	raw     *sql.DB // for what the store does not expose
	// arg is the test's own statements' placeholder for argument i (from 1).
	arg func(i int) string
}

// eachDialect runs f on a new SQLite store and a new PostgreSQL database.
func eachDialect(t *testing.T, f func(t *testing.T, db storeDB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := t.TempDir() + "/s.db"
		raw, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		f(t, storeDB{
			dialect: func(t *testing.T, schema2 bool) mvcc.Dialect {
				d := sqliteDialect(t, "sqlite://"+path).(*sqlite.Dialect)
				if schema2 {
					return sqliteSchema2{d}
				}
				return d
			},
			raw: raw,
			arg: func(int) string { return "?" },
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := framework.PostgresDatabase(t)
		raw, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		f(t, storeDB{
			dialect: func(t *testing.T, schema2 bool) mvcc.Dialect {
				d := dialect(t, dsn)
				if schema2 {
					return postgresSchema2{d}
				}
				return d
			},
			raw: raw,
			arg: func(i int) string { return fmt.Sprint("$", i) },
		})
	})
}

// openDB opens a store on d, closed when t ends (or before, by the caller).
func openDB(t *testing.T, d mvcc.Dialect, opts mvcc.Options) *mvcc.Store {
	t.Helper()
	return openReplica(t, context.Background(), d, opts)
}

func txn(t *testing.T, s *mvcc.Store, ops ...*pb.RequestOp) int64 {
	t.Helper()
	r, err := s.Txn(context.Background(), &pb.TxnRequest{Success: ops})
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

func delOp(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key), PrevKv: true}}}
}

// writeHistory gives s live keys (one on a lease, one with an empty value,
// two written at one revision), keys deleted one at a time and by range, a
// key deleted and created again, and several versions of most.
func writeHistory(t *testing.T, s *mvcc.Store) {
	t.Helper()
	lease, err := s.Grant(context.Background(), mvcc.LeaseGrant{ID: 7, TTL: 3600})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		txn(t, s, putOp([]byte("/r/a"), fmt.Sprint("a", i), 0))
		txn(t, s, putOp([]byte(fmt.Sprint("/r/d/", i)), "gone", 0))
	}
	txn(t, s, putOp([]byte("/r/b"), "b", lease.ID), putOp([]byte("/r/c"), "", 0))
	txn(t, s, delOp("/r/a"))
	txn(t, s, putOp([]byte("/r/a"), "again", 0))
	txn(t, s, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("/r/d/"), RangeEnd: []byte("/r/d0")}}})
	txn(t, s, putOp([]byte("/r/e"), "e0", 0))
	txn(t, s, putOp([]byte("/r/e"), "e1", 0))
}

var everyKey = mvcc.NewKeyRange([]byte("/r/"), []byte("/r0"))

// answers is every read the store serves of its history, as text: Range
// at every revision (whole, keys only, counted, and each key alone),
// History's Log and Get, and the events a watch from revision 1 replays.
func answers(t *testing.T, s *mvcc.Store) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	keys := []string{"/r/a", "/r/b", "/r/c", "/r/d/0", "/r/d/1", "/r/d/2", "/r/e"}
	for rev := int64(1); rev <= s.Rev(); rev++ {
		for _, r := range []*pb.RangeRequest{
			{Key: everyKey.Key, RangeEnd: everyKey.End, Revision: rev},
			{Key: everyKey.Key, RangeEnd: everyKey.End, Revision: rev, KeysOnly: true},
			{Key: everyKey.Key, RangeEnd: everyKey.End, Revision: rev, Limit: 2},
			{Key: everyKey.Key, RangeEnd: everyKey.End, Revision: rev, CountOnly: true},
		} {
			res, err := s.Range(ctx, r)
			if err != nil {
				t.Fatalf("range %v: %v", r, err)
			}
			fmt.Fprintf(&b, "range %v: %d %v %v\n", r, res.Count, res.More, res.Kvs)
		}
		for _, k := range keys {
			kv, err := s.KeyAt(ctx, []byte(k), rev)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "get %s at %d: %v\n", k, rev, kv)
		}
	}
	for _, k := range keys {
		res, err := s.Range(ctx, &pb.RangeRequest{Key: []byte(k)})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "range %s: %v\n", k, res.Kvs)
	}
	page, err := s.Log(ctx, mvcc.LogQuery{Range: everyKey, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "log: %v\n", eventsText(page.Events))
	evs, _, err := s.Events(ctx, 1, s.Rev(), everyKey)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "events: %v\n", eventsText(evs))
	return b.String()
}

func eventsText(evs []*mvcc.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%v %v prev %v at %d\n", e.Type, e.Kv, e.PrevKv, e.UnixMs)
	}
	return b.String()
}

// liveValues reads the live keys' values as a binary of schema 2 did:
// from current's own value column.
func liveValues(t *testing.T, db storeDB) map[string]string {
	t.Helper()
	rows, err := db.raw.Query(`SELECT key, value FROM current`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[string(k)] = string(v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func schemaVersion(t *testing.T, db storeDB) int64 {
	t.Helper()
	var v int64
	if err := db.raw.QueryRow(`SELECT value FROM meta WHERE name = 'schema'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// storeAtSchema2 fills db at schema 2 as a binary of that version left it:
// every live key's value in its current row as well as in its log row.
func storeAtSchema2(t *testing.T, db storeDB) {
	t.Helper()
	s := openDB(t, db.dialect(t, true), mvcc.Options{})
	writeHistory(t, s)
	s.Close()
	if _, err := db.raw.Exec(`UPDATE current SET value = (SELECT l.value FROM log l WHERE l.key = current.key AND l.rev = current.mod_rev)`); err != nil {
		t.Fatal(err)
	}
	if v := schemaVersion(t, db); v != 2 {
		t.Fatalf("the old store is at schema %d, want 2", v)
	}
}

// A store written at schema 2 opens at schema 3 without current's value
// column, and answers every read of its history as before, each live key
// with the value its current row held.
func TestSchema3KeepsEveryAnswer(t *testing.T) {
	eachDialect(t, func(t *testing.T, db storeDB) {
		storeAtSchema2(t, db)
		values := liveValues(t, db)
		if len(values) != 4 {
			t.Fatalf("live keys at schema 2: %q", values)
		}
		// SQL answers every read: no live index, and the ring is empty
		// after a restart.
		sqlOnly := mvcc.Options{DisableLiveIndex: true}
		s := openDB(t, db.dialect(t, true), sqlOnly)
		before := answers(t, s)
		s.Close()

		for _, opts := range []mvcc.Options{sqlOnly, {}} {
			s = openDB(t, db.dialect(t, false), opts)
			if v := schemaVersion(t, db); v != 3 {
				t.Fatalf("schema %d after open, want 3", v)
			}
			if after := answers(t, s); after != before {
				t.Fatalf("answers at schema 3 (%+v):\n%s\nwant, as at schema 2:\n%s", opts, after, before)
			}
			for k, v := range values {
				res, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte(k)})
				if err != nil || len(res.Kvs) != 1 || string(res.Kvs[0].Value) != v {
					t.Fatalf("%s at schema 3: %v, %v; its current row held %q", k, res, err, v)
				}
			}
			s.Close()
		}
		if _, err := db.raw.Exec(`SELECT value FROM current`); err == nil {
			t.Fatal("current still has a value column at schema 3")
		}
	})
}

// A store at schema 2 whose live key has lost its log row is not migrated:
// the value would go with current's column. It stays at schema 2, whole.
func TestSchema3RefusesALiveKeyWithoutItsLogRow(t *testing.T) {
	eachDialect(t, func(t *testing.T, db storeDB) {
		storeAtSchema2(t, db)
		if _, err := db.raw.Exec(`DELETE FROM log WHERE key = `+db.arg(1)+` AND rev = (SELECT mod_rev FROM current WHERE key = `+db.arg(2)+`)`, []byte("/r/e"), []byte("/r/e")); err != nil {
			t.Fatal(err)
		}
		_, err := mvcc.Open(context.Background(), db.dialect(t, false), mvcc.Options{})
		want := `migrate to schema 3: 1 live keys have no log row at their mod revision (first "/r/e")`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("open: %v, want %q", err, want)
		}
		if v := schemaVersion(t, db); v != 2 {
			t.Fatalf("schema %d after the refusal, want 2", v)
		}
		if values := liveValues(t, db); values["/r/e"] != "e1" {
			t.Fatalf("after the refusal, current holds %q", values)
		}
	})
}

// Retention never deletes the log row a live key's value is read from,
// however high its floor: after pruning up to the newest revision, SQL
// still reads every live key with its value.
func TestPruneKeepsEveryLiveValue(t *testing.T) {
	eachDialect(t, func(t *testing.T, db storeDB) {
		ctx := context.Background()
		clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
		s := openDB(t, db.dialect(t, false), mvcc.Options{Now: clock.Now, Retain: mvcc.MinRetain, PruneInterval: time.Hour, DisableLiveIndex: true})
		writeHistory(t, s)
		want, err := s.Range(ctx, &pb.RangeRequest{Key: everyKey.Key, RangeEnd: everyKey.End})
		if err != nil {
			t.Fatal(err)
		}
		// The floor is the newest revision committed a window before the
		// latest write: above every revision writeHistory made.
		clock.Advance(2 * mvcc.MinRetain)
		floor := txn(t, s, putOp([]byte("/s/after"), "x", 0))
		clock.Advance(2 * mvcc.MinRetain)
		txn(t, s, putOp([]byte("/s/after"), "y", 0))
		n, err := s.Prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.RetainFloor() != floor || n == 0 {
			t.Fatalf("pruned %d rows up to floor %d, want some up to %d", n, s.RetainFloor(), floor)
		}
		// Each live key keeps one row, its latest change; nothing else
		// writeHistory wrote remains.
		var rows int64
		if err := db.raw.QueryRow(`SELECT COUNT(*) FROM log WHERE key < `+db.arg(1), []byte("/s")).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		got, err := s.Range(ctx, &pb.RangeRequest{Key: everyKey.Key, RangeEnd: everyKey.End})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.Kvs) != fmt.Sprint(want.Kvs) || rows != int64(len(want.Kvs)) {
			t.Fatalf("after pruning, %d log rows and the live keys\n%v\nwant one row each of\n%v", rows, got.Kvs, want.Kvs)
		}
		for _, kv := range want.Kvs {
			got, err := s.Range(ctx, &pb.RangeRequest{Key: kv.Key})
			if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != string(kv.Value) {
				t.Fatalf("%s after pruning: %v, %v; want %q", kv.Key, got, err, kv.Value)
			}
		}
	})
}
