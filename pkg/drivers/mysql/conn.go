package mysql

// The connections the pools hand to the engine: go-sql-driver/mysql's,
// with what MySQL needs beyond the statements' text, each a difference of
// session state from PostgreSQL's: every connection's settings (setup),
// named locks that last as long as the transaction that took them
// (releaseLocks), and the transaction begun again after the schema's DDL,
// which MySQL commits on its own (ExecContext). Statements go to the
// driver as they are: the dialect writes them in MySQL's syntax (sql.go, sql_batch.go),
// and the engine prepares none (mvcc.TextProtocol).

import (
	"context"
	"database/sql/driver"
	"strings"
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
	bc, ok := dc.(baseConn)
	if !ok {
		dc.Close()
		return nil, errNotMySQL
	}
	for _, q := range c.setup {
		if _, err := bc.ExecContext(ctx, q, nil); err != nil {
			dc.Close()
			return nil, err
		}
	}
	return &conn{baseConn: bc}, nil
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

// conn is go-sql-driver's connection, which it embeds (Prepare,
// QueryContext and the rest are its own), keeping the transaction's
// scope for the named locks taken in it.
type conn struct {
	baseConn
	// inTx: a transaction begun through BeginTx is open.
	inTx bool
	// locked: a statement took a named lock (GET_LOCK) in the open
	// transaction.
	locked bool
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.baseConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.inTx, c.locked = true, false
	return &txn{c: c, base: tx}, nil
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.note(query)
	return c.baseConn.QueryContext(ctx, query, args)
}

// ExecContext begins a new transaction after a DDL statement of the
// schema run inside one: MySQL commits the open transaction before and
// after each DDL statement, and the statements that follow it (the
// schema's version in meta, after a migration's DDL) would otherwise each
// commit on their own instead of with the transaction's COMMIT.
func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.note(query)
	res, err := c.baseConn.ExecContext(ctx, query, args)
	if err == nil && c.inTx && isDDL(query) {
		if _, err := c.baseConn.ExecContext(ctx, startTransactionSQL, nil); err != nil {
			return nil, err
		}
	}
	return res, err
}

// note marks the transaction as holding a named lock when query takes
// one: the dialect's two (LockMigrate, LockImport).
func (c *conn) note(query string) {
	if c.inTx && (query == migrateLockSQL || query == importLockSQL) {
		c.locked = true
	}
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
	if _, err := c.baseConn.ExecContext(context.Background(), releaseLocksSQL, nil); err != nil {
		c.baseConn.Close()
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

// ddl is the schema's DDL: every statement of Migrations that makes a
// table, and meta's (mvcc.SchemaSQL.CreateMeta).
var ddl = func() map[string]bool {
	m := map[string]bool{statements.Schema.CreateMeta: true}
	for _, step := range (&Dialect{}).Migrations() {
		for _, q := range step {
			if strings.HasPrefix(q, "CREATE ") {
				m[q] = true
			}
		}
	}
	return m
}()

// isDDL reports whether q is one of the schema's DDL statements; every
// one begins CREATE, which rejects the others cheaply.
func isDDL(q string) bool { return strings.HasPrefix(q, "CREATE ") && ddl[q] }

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)
