package mvcc_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/mytest"
)

// The dialect suite: each test body runs once per database the engine
// serves, a backend being an entry of backends (as Litestream's replica
// client tests run one body per client). A backend that cannot run here
// is skipped loudly, or fails under CI=true (framework.Run).

var quietLog = slog.New(slog.DiscardHandler)

// backend is one database of the dialect suite.
type backend struct {
	name framework.Backend
	// replicas: several stores may serve the database at once.
	replicas bool
	// newDB makes an empty database.
	newDB func(t *testing.T) *testDB
}

// testDB is an empty database of a backend.
type testDB struct {
	// dialect is a new dialect on the database: each store, or replica,
	// takes one of its own.
	dialect func() mvcc.Dialect
	// raw is the test's own connection, for what the store does not
	// expose; arg is its statements' placeholder for argument i (from 1).
	raw *sql.DB
	arg func(i int) string
	// lockBatch, in a transaction of raw, takes the lock every write
	// batch takes first (replicas only).
	lockBatch string
	// refuse makes the database refuse a current row whose key is bad.
	refuse []string
	// holdServers, in a transaction of raw, keeps the writes of servers'
	// rows in meta waiting; serversWaiting counts the sessions running
	// such a write, waiting or not (replicas only: Announce).
	holdServers, serversWaiting string
}

var (
	sqliteBackend = backend{name: framework.SQLite, newDB: func(t *testing.T) *testDB {
		path := filepath.Join(t.TempDir(), "s.db")
		raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		return &testDB{
			dialect: func() mvcc.Dialect { return sqliteDialect(t, "sqlite://"+path) },
			raw:     raw,
			arg:     func(int) string { return "?" },
			refuse:  []string{`CREATE TRIGGER refuse_bad BEFORE INSERT ON current WHEN NEW.key = CAST('bad' AS BLOB) BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`},
		}
	}}
	postgresBackend  = backend{name: framework.Postgres, replicas: true, newDB: func(t *testing.T) *testDB { return postgresDB(t, false) }}
	pgbouncerBackend = backend{name: framework.PgBouncer, replicas: true, newDB: func(t *testing.T) *testDB { return postgresDB(t, true) }}
	mysqlBackend     = backend{name: framework.MySQL, replicas: true, newDB: func(t *testing.T) *testDB {
		dsn := framework.MySQLDatabase(t)
		raw, err := mytest.Connect(dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		return &testDB{
			dialect: func() mvcc.Dialect {
				d, err := mysql.New(dsn, mysql.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return d
			},
			raw:         raw,
			arg:         func(int) string { return "?" },
			lockBatch:   `UPDATE meta SET value = value WHERE name = 'rev'`,
			refuse:      []string{"CREATE TRIGGER refuse_bad BEFORE INSERT ON current FOR EACH ROW BEGIN IF NEW.`key` = 'bad' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END"},
			holdServers: `SELECT name FROM meta WHERE name LIKE 'server/%' FOR UPDATE`,
			serversWaiting: `SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE ID <> CONNECTION_ID() AND INFO LIKE '%INSERT INTO meta%'`,
		}
	}}
	// backends are every database the engine serves; replicated those
	// several stores may serve at once.
	backends   = []backend{sqliteBackend, postgresBackend, pgbouncerBackend, mysqlBackend}
	replicated = []backend{postgresBackend, pgbouncerBackend, mysqlBackend}
)

// postgresDB is a new PostgreSQL database, reached through the test
// PgBouncer (transaction mode) when pooled; raw connects directly.
func postgresDB(t *testing.T, pooled bool) *testDB {
	dsn := framework.PostgresDatabase(t)
	via := dsn
	if pooled {
		pgb, err := framework.PgBouncerServer()
		if err != nil {
			framework.Unavailable(t, "PgBouncer", err)
		}
		if via, err = pgb.Through(dsn); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return &testDB{
		dialect: func() mvcc.Dialect {
			d, err := postgres.New(via, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		raw:       raw,
		arg:       func(i int) string { return fmt.Sprint("$", i) },
		lockBatch: `UPDATE meta SET value = value WHERE name = 'rev'`,
		refuse: []string{`CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.key = 'bad'::bytea THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$`,
			`CREATE TRIGGER refuse_bad BEFORE INSERT OR UPDATE ON current FOR EACH ROW EXECUTE FUNCTION refuse_bad()`},
		holdServers: `LOCK TABLE meta IN SHARE MODE`,
		serversWaiting: `SELECT COUNT(*) FROM pg_stat_activity
			WHERE pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%INSERT INTO meta%'`,
	}
}

// eachBackend runs f once per backend of bs, as a subtest named after it,
// on a new empty database.
func eachBackend(t *testing.T, bs []backend, f func(t *testing.T, b backend, db *testDB)) {
	t.Helper()
	names := make([]framework.Backend, len(bs))
	for i, b := range bs {
		names[i] = b.name
	}
	framework.Run(t, names, func(t *testing.T, name framework.Backend) {
		b := bs[slices.IndexFunc(bs, func(b backend) bool { return b.name == name })]
		f(t, b, b.newDB(t))
	})
}

// open opens a store on db with a dialect of its own, closed when t ends.
func (db *testDB) open(t *testing.T, opts mvcc.Options) *mvcc.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if opts.Logger == nil {
		opts.Logger = quietLog
	}
	return openReplica(t, ctx, db.dialect(), opts)
}

// checkTables replays the log and compares it with current and meta
// (framework.CheckTables).
func (db *testDB) checkTables(t *testing.T) {
	t.Helper()
	framework.CheckTables(t, db.raw)
}
