package postgres

// Connections that work behind a pooler (ADR-026). A pooler in transaction
// mode (PgBouncer's usual setting) hands each transaction, or each
// statement outside one, to whichever server connection is free, so
// nothing may outlive a transaction: no session settings, no startup
// parameters a pooler refuses, no named prepared statements. Unless the
// connection proves to be PostgreSQL's own backend, the dialect assumes a
// pooler and keeps to what works on any connection.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
)

// direct reports whether the server cfg names is PostgreSQL's own backend
// rather than a pooler. The BackendKeyData a backend sends at startup
// carries its process ID, which pg_backend_pid() returns; a pooler sends a
// key of its own (PgBouncer, Odyssey, pgcat and Supavisor make one up:
// the client is not tied to one server connection, so no backend's key
// would cancel its queries). Two statements, each a transaction of its
// own, must both name that process: a pooler passing one backend's key on
// would be caught when it moves the second elsewhere. A pooler that
// passes the key on and keeps the connection for the whole session
// (session mode) is a session, which is what the faster mode needs.
func direct(ctx context.Context, cfg *pgx.ConnConfig) (bool, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	key := conn.PgConn().PID()
	for range 2 {
		var pid uint32
		// Simple protocol: no statement is left on the server.
		if err := conn.QueryRow(ctx, backendPIDSQL, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
			return false, err
		}
		if pid != key {
			return false, nil
		}
	}
	return true, nil
}

// connector opens the pools' connections (database/sql through pgx's
// stdlib). Behind a pooler (pooled) it keeps every connection free of
// state between transactions: statements are not prepared on the server,
// and a transaction sets its isolation and statement_timeout itself.
type connector struct {
	driver.Connector
	pooled bool
	begins beginStatements // each transaction's BEGIN when pooled, its statement_timeout included
}

// cancelGrace is how long a statement whose context ended may still run
// behind a pooler before its connection is closed under it. A client
// that disconnects while its statement runs makes PgBouncer send the
// server a cancel request, and PgBouncer 1.18 to 1.20 (Debian 12 ships
// 1.18) can crash on the answer (pgbouncer/pgbouncer#822): its fatal
// "server in bad state: 11" takes every cluster behind it down. Letting
// the statement finish first (pgx otherwise closes the connection as the
// context ends) keeps a canceled request from ever doing that; the
// statements are short, and the server would run them on anyway.
const cancelGrace = 5 * time.Second

func (d *Dialect) openDB(cfg *pgx.ConnConfig) *sql.DB {
	pooled := d.pooled.Load()
	if pooled {
		cfg = cfg.Copy()
		cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn(), DeadlineDelay: cancelGrace}
		}
	}
	return sql.OpenDB(connector{Connector: stdlib.GetConnector(*cfg), pooled: pooled, begins: newBeginStatements(d.opts.StatementTimeout.Milliseconds())})
}

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil || !c.pooled {
		return dc, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("postgres: pgx's stdlib connector made a %T", dc)
	}
	return &pooledConn{stdConn: sc, begins: c.begins}, nil
}

// pooledConn is a pgx stdlib connection that leaves nothing on the server
// between transactions. Every other method is stdlib's.
type pooledConn struct {
	*stdConn
	begins beginStatements
}

// stdConn names the embedded field so that it does not hide stdlib.Conn's
// Conn method.
type stdConn = stdlib.Conn

// BeginTx sends the isolation level and the statement timeout with BEGIN,
// in one simple-protocol message: one round trip, as a bare BEGIN.
func (c *pooledConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	q, err := c.begins.of(opts)
	if err != nil {
		return nil, err
	}
	tx, err := c.Conn().BeginTx(ctx, pgx.TxOptions{BeginQuery: q})
	if err != nil {
		return nil, err
	}
	return pooledTx{ctx: ctx, tx: tx}, nil
}

type pooledTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t pooledTx) Commit() error   { return t.tx.Commit(t.ctx) }
func (t pooledTx) Rollback() error { return t.tx.Rollback(t.ctx) }

// PrepareContext prepares nothing on the server: the statement's text is
// sent with each execution (pgx's cache_describe mode: one round trip,
// binary parameters and results, as a prepared statement's), since a named
// statement would be on one server connection and executed on another.
func (c *pooledConn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	return &unpreparedStmt{c: c, q: query}, nil
}

type unpreparedStmt struct {
	c *pooledConn
	q string
}

func (s *unpreparedStmt) Close() error { return nil }

// NumInput is unknown (-1): database/sql then leaves the count to the
// server.
func (s *unpreparedStmt) NumInput() int { return -1 }

func (s *unpreparedStmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, driver.ErrSkip
}

func (s *unpreparedStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, driver.ErrSkip
}

func (s *unpreparedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.q, args)
}

func (s *unpreparedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.q, args)
}

// pgxConner is a database/sql driver connection with pgx's beneath it:
// stdlib's, and pooledConn through it.
type pgxConner interface{ Conn() *pgx.Conn }

var (
	_ driver.ConnBeginTx        = (*pooledConn)(nil)
	_ driver.ConnPrepareContext = (*pooledConn)(nil)
	_ driver.StmtExecContext    = (*unpreparedStmt)(nil)
	_ driver.StmtQueryContext   = (*unpreparedStmt)(nil)
	_ pgxConner                 = (*pooledConn)(nil)
)
