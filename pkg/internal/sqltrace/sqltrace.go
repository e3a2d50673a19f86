// Package sqltrace lets a test see the text of every statement the
// dialects send to their databases (the statement-list tests, ADR-039):
// while a recorder is set (Record), the connections the dialects open
// pass each statement's text to it, when it is prepared or sent. Without
// one, nothing is wrapped and nothing recorded.
package sqltrace

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
)

var recorder atomic.Pointer[func(query string)]

// Record sets f as the recorder of the connections opened from now on,
// until stop. f may be called from several goroutines at once.
func Record(f func(query string)) (stop func()) {
	recorder.Store(&f)
	return func() { recorder.Store(nil) }
}

// Recorder is the recorder set, or nil.
func Recorder() func(query string) {
	if f := recorder.Load(); f != nil {
		return *f
	}
	return nil
}

// Open is sql.Open, its connections recorded while a recorder is set.
func Open(driverName, dsn string) (*sql.DB, error) {
	rec := Recorder()
	if rec == nil {
		return sql.Open(driverName, dsn)
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	drv := db.Driver()
	db.Close()
	var c driver.Connector = dsnConnector{drv: drv, dsn: dsn}
	if dc, ok := drv.(driver.DriverContext); ok {
		if c, err = dc.OpenConnector(dsn); err != nil {
			return nil, err
		}
	}
	return sql.OpenDB(Connector(c)), nil
}

// Connector is c, its connections recorded while a recorder is set.
func Connector(c driver.Connector) driver.Connector {
	rec := Recorder()
	if rec == nil {
		return c
	}
	return connector{base: c, rec: rec}
}

type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

type connector struct {
	base driver.Connector
	rec  func(string)
}

func (c connector) Driver() driver.Driver { return c.base.Driver() }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: dc, rec: c.rec}, nil
}

// conn records each statement its driver's connection prepares or runs,
// and has every optional method database/sql looks for, passing on to
// the driver's where it has one and answering as database/sql would
// without it where it has not.
type conn struct {
	driver.Conn
	rec func(string)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.rec(query)
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip // database/sql prepares it instead
	}
	c.rec(query)
	return q.QueryContext(ctx, query, args)
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.rec(query)
	return e.ExecContext(ctx, query, args)
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	if opts != (driver.TxOptions{}) {
		return nil, errors.New("sqltrace: the driver's connection takes no transaction options")
	}
	//lint:ignore SA1019 the driver's connection has no BeginTx
	return c.Conn.Begin()
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

var (
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)
