package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// pooledDatabase is a fresh database and its URL through the test
// PgBouncer (transaction mode, default settings).
func pooledDatabase(t testing.TB) (direct, pooled string) {
	t.Helper()
	framework.Require(t, framework.PgBouncer)
	direct = framework.PostgresDatabase(t)
	pgb, err := framework.PgBouncerServer()
	if err != nil {
		framework.Unavailable(t, "PgBouncer", err)
	}
	pooled, err = pgb.Through(direct)
	if err != nil {
		t.Fatal(err)
	}
	return direct, pooled
}

// The dialect tells PostgreSQL from a pooler by the connection alone, and
// its pools work through PgBouncer in transaction mode: no startup
// parameter it refuses, each transaction with the isolation and statement
// timeout it asked for, and statements run again and again on whichever
// server connection (named prepared statements would fail there with
// "already exists" or "does not exist").
func TestPoolerDetected(t *testing.T) {
	direct, pooled := pooledDatabase(t)
	for _, c := range []struct {
		dsn    string
		pooled bool
	}{{direct, false}, {pooled, true}} {
		d, err := postgres.New(c.dsn, postgres.Options{StatementTimeout: 45 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		w, r, err := d.Open(t.Context())
		if err != nil {
			t.Fatalf("open (pooled %v): %v", c.pooled, err)
		}
		if d.Pooled() != c.pooled {
			t.Errorf("Pooled() = %v through %s, want %v", d.Pooled(), c.dsn, c.pooled)
		}
		checkTx(t, r, sql.LevelRepeatableRead, "repeatable read", "45s")
		checkTx(t, w, sql.LevelReadCommitted, "read committed", "45s")
		// Many connections at once, each running the same statements
		// through the pool's prepared statement: behind a pooler nothing
		// may be prepared on a server connection.
		st, err := r.PrepareContext(t.Context(), `SELECT $1::bigint + 1`)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 16)
		for g := range 16 {
			go func() {
				var err error
				for i := range 50 {
					var n int64
					if err = st.QueryRowContext(t.Context(), int64(g*100+i)).Scan(&n); err == nil && n != int64(g*100+i+1) {
						err = errors.New("wrong answer")
					}
					if err != nil {
						break
					}
				}
				errs <- err
			}()
		}
		for range 16 {
			if err := <-errs; err != nil {
				t.Errorf("prepared statement through the pool (pooled %v): %v", c.pooled, err)
			}
		}
		st.Close()
		w.Close()
		r.Close()
	}
}

// checkTx begins a transaction at iso on db and checks what the server
// says its isolation and statement timeout are.
func checkTx(t *testing.T, db *sql.DB, iso sql.IsolationLevel, wantIso, wantTimeout string) {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), &sql.TxOptions{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var gotIso, gotTimeout string
	if err := tx.QueryRowContext(t.Context(), `SELECT current_setting('transaction_isolation'), current_setting('statement_timeout')`).Scan(&gotIso, &gotTimeout); err != nil {
		t.Fatal(err)
	}
	if gotIso != wantIso || gotTimeout != wantTimeout {
		t.Errorf("transaction at %v: isolation %q, statement_timeout %q; want %q, %q", iso, gotIso, gotTimeout, wantIso, wantTimeout)
	}
}

// Through PgBouncer in transaction mode LISTEN is accepted and delivers
// nothing: Listen finds it out with its probe and says so, instead of
// waiting for notifications that never come; with a direct listen
// endpoint it listens and delivers.
func TestListenBehindPooler(t *testing.T) {
	defer postgres.SetProbeTimeout(2 * time.Second)()
	direct, pooled := pooledDatabase(t)

	d, err := postgres.New(pooled, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ups atomic.Int32
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = d.Listen(ctx, func(up bool) {
		if up {
			ups.Add(1)
		}
	}, func(string) {})
	if !errors.Is(err, mvcc.ErrNoNotifications) || ups.Load() != 0 {
		t.Fatalf("Listen through PgBouncer: %v after %d ups, want ErrNoNotifications and none", err, ups.Load())
	}

	d, err = postgres.New(pooled, postgres.Options{ListenEndpoint: direct})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	up := make(chan bool, 4)
	lctx, lcancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Listen(lctx, func(b bool) { up <- b }, func(p string) { got <- p }) }()
	select {
	case <-up:
	case err := <-done:
		t.Fatalf("Listen on the direct endpoint: %v", err)
	case <-ctx.Done():
		t.Fatal("Listen on the direct endpoint never listened")
	}
	// A notification sent through the pooler, as a replica's commit is.
	db := sqlDB(t, pooled+"&default_query_exec_mode=simple_protocol")
	if err := d.Notify(ctx, db, "someone-r"); err != nil {
		t.Fatal(err)
	}
	// The probe's own notification went to a channel of its own.
	if p := <-got; p != "someone-r" {
		t.Fatalf("notification %q, want someone-r", p)
	}
	lcancel()
	if err := <-done; err != nil {
		t.Fatalf("Listen at its end: %v", err)
	}
}

// A server behind a transaction pooler holds no session an import could
// see, so it keeps a row in meta: an import is refused while the server
// runs, even before its LISTEN probe has failed, and runs as soon as the
// server has closed. Without the row the import would write under a
// serving store (ADR-026).
func TestImportRefusedWhileServedThroughPooler(t *testing.T) {
	defer postgres.SetProbeTimeout(time.Second)()
	direct, pooled := pooledDatabase(t)
	s, err := mvcc.Open(t.Context(), dialectFor(t, pooled), mvcc.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := sqlDB(t, direct)
	for _, when := range []string{"as it starts", "once its LISTEN probe has failed"} {
		if when != "as it starts" {
			time.Sleep(2 * time.Second) // past the probe's timeout
		}
		var live int
		deadline := time.Now().Add(10 * time.Second)
		for live == 0 && time.Now().Before(deadline) {
			if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM meta WHERE name LIKE 'server/%'`).Scan(&live); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, via := range []string{direct, pooled} {
			im, err := mvcc.BeginImport(t.Context(), dialectFor(t, via), mvcc.ImportOptions{Logger: quiet})
			if err == nil {
				im.Close()
				t.Fatalf("%s: an import into a database served through a pooler: no error", when)
			}
			if !strings.Contains(err.Error(), "a QuantyKube server is connected to") || !strings.Contains(err.Error(), "through a pooler") {
				t.Errorf("%s: import: %v", when, err)
			}
		}
	}
	s.Close()
	im, err := mvcc.BeginImport(t.Context(), dialectFor(t, pooled), mvcc.ImportOptions{Logger: quiet})
	if err != nil {
		t.Fatalf("import once the server closed: %v", err)
	}
	im.Close()
}
