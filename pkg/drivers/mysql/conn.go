package mysql

// The connections the pools hand to the engine. The engine writes SQL
// that SQLite and PostgreSQL share; MySQL and MariaDB differ in three
// ways that each connection corrects (rewrite), and in two of session
// state that it sets up or clears (setup, releaseLocks).

import (
	"context"
	"database/sql/driver"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// connector opens connections through go-sql-driver/mysql's connector
// and runs setup on each before the pool uses it.
type connector struct {
	base  driver.Connector
	setup []string
}

func (c *connector) Driver() driver.Driver { return c.base.Driver() }

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := dc.(driver.ExecerContext)
	if !ok {
		dc.Close()
		return nil, errNotMySQL
	}
	for _, q := range c.setup {
		if _, err := ex.ExecContext(ctx, q, nil); err != nil {
			dc.Close()
			return nil, err
		}
	}
	return &conn{base: dc}, nil
}

// baseConn is what go-sql-driver's connection implements.
type baseConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.QueryerContext
	driver.ExecerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// conn rewrites each statement's text (rewrite) and keeps transaction
// scope for the named locks taken in a transaction (releaseLocks).
type conn struct {
	base driver.Conn
	// inTx: a transaction begun through BeginTx is open.
	inTx bool
	// locked: a statement took a named lock (GET_LOCK) in the open
	// transaction.
	locked bool
}

func (c *conn) b() baseConn { return c.base.(baseConn) }

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext prepares nothing on the server: the statement's text
// goes with each execution, its arguments written in (InterpolateParams),
// in one round trip as a prepared statement's execution would. MariaDB
// 10.11 fails the second execution of some prepared statements the engine
// runs (a correlated subquery over a merged derived table answers
// "Unknown column"), and the text protocol has no such failure.
func (c *conn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	return &textStmt{c: c, q: query}, nil
}

type textStmt struct {
	c *conn
	q string
}

func (s *textStmt) Close() error { return nil }

// NumInput is unknown (-1): database/sql leaves the count to the driver.
func (s *textStmt) NumInput() int { return -1 }

func (s *textStmt) Exec([]driver.Value) (driver.Result, error) { return nil, driver.ErrSkip }
func (s *textStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, driver.ErrSkip }

func (s *textStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.c.ExecContext(ctx, s.q, args)
}

func (s *textStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.c.QueryContext(ctx, s.q, args)
}

func (c *conn) Close() error { return c.base.Close() }

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.b().BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.inTx, c.locked = true, false
	return &txn{c: c, base: tx}, nil
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.b().QueryContext(ctx, c.note(query), args)
}

// ExecContext begins a new transaction after a DDL statement run inside
// one: MySQL commits the open transaction before and after each DDL
// statement, and the statements that follow it (the schema's version in
// meta, after a migration's DDL) would otherwise each commit on their own
// instead of with the transaction's COMMIT.
func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.b().ExecContext(ctx, c.note(query), args)
	if err == nil && c.inTx && isDDL(query) {
		if _, err := c.b().ExecContext(ctx, "START TRANSACTION", nil); err != nil {
			return nil, err
		}
	}
	return res, err
}

func (c *conn) Ping(ctx context.Context) error              { return c.b().Ping(ctx) }
func (c *conn) ResetSession(ctx context.Context) error      { return c.b().ResetSession(ctx) }
func (c *conn) IsValid() bool                               { return c.b().IsValid() }
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error { return c.b().CheckNamedValue(nv) }
func (c *conn) rawExec(ctx context.Context, q string) error {
	_, err := c.b().ExecContext(ctx, q, nil)
	return err
}

// note rewrites query, and marks the transaction as holding a named lock
// when the statement takes one.
func (c *conn) note(query string) string {
	if c.inTx && strings.Contains(query, "GET_LOCK(") {
		c.locked = true
	}
	return rewrite(query)
}

// releaseLocks lets go of the named locks the transaction took: GET_LOCK's
// locks belong to the session, which outlives the transaction in the
// pool, and the dialect's locks are meant to last as long as the
// transaction (LockMigrate, LockImport), as PostgreSQL's
// pg_advisory_xact_lock does. A failed release closes the connection,
// which releases them too.
func (c *conn) releaseLocks() error {
	locked := c.locked
	c.inTx, c.locked = false, false
	if !locked {
		return nil
	}
	if err := c.rawExec(context.Background(), releaseLocksSQL); err != nil {
		c.base.Close()
		return driver.ErrBadConn
	}
	return nil
}

type txn struct {
	c    *conn
	base driver.Tx
}

func (t *txn) Commit() error {
	err := t.base.Commit()
	if rerr := t.c.releaseLocks(); err == nil && rerr != nil {
		err = rerr
	}
	return err
}

func (t *txn) Rollback() error {
	err := t.base.Rollback()
	if rerr := t.c.releaseLocks(); err == nil && rerr != nil {
		err = rerr
	}
	return err
}

var ddlRE = regexp.MustCompile(`(?i)^\s*(CREATE|ALTER|DROP|RENAME|TRUNCATE)\s`)

func isDDL(q string) bool { return ddlRE.MatchString(q) }

// Rewrites of the engine's SQL:
//   - key and cursor, column names of the engine's tables, are reserved
//     words in MySQL: quoted wherever they stand as a lowercase word
//     outside a string literal (the dialect's own SQL writes keywords in
//     capitals);
//   - ON CONFLICT (...) DO UPDATE SET c = excluded.c is ON DUPLICATE KEY
//     UPDATE c = VALUES(c) (both MySQL and MariaDB accept VALUES());
//   - the lock a batch takes (UPDATE ... RETURNING, which MySQL lacks) is
//     the same row lock taken with SELECT ... FOR UPDATE.
var (
	onConflictRE = regexp.MustCompile(`ON CONFLICT\s*\([^)]*\)\s*DO UPDATE SET`)
	excludedRE   = regexp.MustCompile(`\bexcluded\.(\w+)`)
	returningRE  = regexp.MustCompile(`^UPDATE meta SET value = value WHERE name = '(\w+)' RETURNING value$`)
)

// rewriteCache holds rewritten statements by text: the engine's texts are
// few and repeat (a variable-length IN list makes one text per length).
var (
	rewriteCache sync.Map
	rewriteCount atomic.Int64
)

const rewriteCacheMax = 4096

func rewrite(q string) string {
	if v, ok := rewriteCache.Load(q); ok {
		return v.(string)
	}
	out := rewriteUncached(q)
	if rewriteCount.Load() < rewriteCacheMax {
		rewriteCount.Add(1)
		rewriteCache.Store(q, out)
	}
	return out
}

func rewriteUncached(q string) string {
	if m := returningRE.FindStringSubmatch(q); m != nil {
		return "SELECT value FROM meta WHERE name = '" + m[1] + "' FOR UPDATE"
	}
	if onConflictRE.MatchString(q) {
		q = onConflictRE.ReplaceAllString(q, "ON DUPLICATE KEY UPDATE")
		q = excludedRE.ReplaceAllString(q, "VALUES($1)")
	}
	return quoteReserved(q)
}

// reserved are the engine's column names that MySQL reserves.
var reserved = []string{"key", "cursor"}

// quoteReserved puts backquotes around each reserved word standing alone
// outside quotes.
func quoteReserved(q string) string {
	if !strings.Contains(q, "key") && !strings.Contains(q, "cursor") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		if quote != 0 {
			if c == quote {
				quote = 0
			}
			b.WriteByte(c)
			continue
		}
		if c == '\'' || c == '"' || c == '`' {
			quote = c
			b.WriteByte(c)
			continue
		}
		if word(c) && (i == 0 || !word(q[i-1])) {
			j := i
			for j < len(q) && word(q[j]) {
				j++
			}
			w := q[i:j]
			for _, r := range reserved {
				if w == r {
					w = "`" + r + "`"
					break
				}
			}
			b.WriteString(w)
			i = j - 1
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func word(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.StmtExecContext    = (*textStmt)(nil)
	_ driver.StmtQueryContext   = (*textStmt)(nil)
)
