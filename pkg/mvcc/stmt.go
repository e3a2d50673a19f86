package mvcc

import (
	"context"
	"database/sql"
	"sync"
)

// Every statement the engine runs is one of its dialect's Statements,
// whose texts are fixed when the store opens. The statements that
// requests run are prepared then, on the pool that runs them (prepare):
// the reads on the readers' pool, and on SQLite the write batch's on the
// writer's one connection. A statement run inside a transaction runs
// through its pool's prepared statement (prepTx). The others run by their
// text: the migration's, an import's and retention's, which run a few
// times in a store's life, and a replica batch's, whose connection keeps
// a prepared statement per text already (pgx's statement cache). Where
// the dialect's driver sends statements as text (TextProtocol: MySQL),
// nothing is prepared, and every statement runs by its text.

// readStatements are the statements the readers' pool prepares.
func readStatements(st *Statements) []string {
	return texts(&st.Meta, &st.Lease.Keys, &st.Range, &st.Watch, &st.History, &st.LogPage, &st.RangeAt, &st.Usage, &st.Current.All)
}

// writeStatements are the statements the writer's connection prepares
// where this process is the database's one writer (SQLite's batch).
func writeStatements(st *Statements) []string {
	return texts(&st.Batch, &st.Current.Get, &st.Current.Range, &st.Current.ByLease, &st.Lease.Exists, &st.Lease.Insert, &st.Lease.Delete)
}

// prepared is a pool's prepared statements, by text.
type prepared struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newPrepared(db *sql.DB) *prepared {
	return &prepared{db: db, m: map[string]*sql.Stmt{}}
}

// prepare prepares qs. Call it holding no connection of the pool, as the
// store opens: preparing on the pool while one of its connections is held
// in a transaction can wait forever for a free one.
func (c *prepared) prepare(ctx context.Context, qs []string) error {
	for _, q := range qs {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.m[q] = st
		c.mu.Unlock()
	}
	return nil
}

// lookup is q's prepared statement (nil: q runs by its text).
func (c *prepared) lookup(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[q]
}

func (c *prepared) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}

// prepareStatements prepares, once the schema is there, what requests
// will run (readStatements, and writeStatements for a store that is its
// database's one writer).
func (s *Store) prepareStatements(ctx context.Context, oneWriter bool) error {
	if _, ok := s.d.(TextProtocol); ok {
		return nil
	}
	if err := s.rstmts.prepare(ctx, readStatements(s.sql)); err != nil {
		return err
	}
	if oneWriter {
		return s.wstmts.prepare(ctx, writeStatements(s.sql))
	}
	return nil
}

// readRow runs a one-row read on the reader pool, through its prepared
// statement: History's reads are such queries, and parsing each anew was
// most of their time.
func (s *Store) readRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st := s.rstmts.lookup(q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.rdb.QueryRowContext(ctx, q, args...)
}

// readRows is readRow for reads of many rows.
func (s *Store) readRows(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if st := s.rstmts.lookup(q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.rdb.QueryContext(ctx, q, args...)
}

// prepTx runs one transaction's statements through the pool's prepared
// statements, or by their text where the pool prepared none. With local
// set (a SQLite write batch, where one statement serves every request),
// the transaction's statements are kept there for its lifetime.
type prepTx struct {
	tx    *sql.Tx
	p     *prepared
	local map[string]*sql.Stmt
}

// stmt is where q runs: its prepared statement, or the transaction.
func (t prepTx) stmt(ctx context.Context, q string) stmtLike {
	if st, ok := t.local[q]; ok {
		return st
	}
	st := t.p.lookup(q)
	if st == nil {
		return bound{tx: t.tx, q: q}
	}
	// Tx.StmtContext makes a new transaction statement on every call
	// (registered with the pool and the transaction until it ends): a
	// batch that runs the statement for each of its requests keeps the
	// first.
	txst := t.tx.StmtContext(ctx, st)
	if t.local != nil {
		t.local[q] = txst
	}
	return txst
}

func (t prepTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.stmt(ctx, q).QueryContext(ctx, args...)
}

func (t prepTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.stmt(ctx, q).QueryRowContext(ctx, args...)
}

func (t prepTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.stmt(ctx, q).ExecContext(ctx, args...)
}

// stmtLike is a *sql.Stmt, or a statement's text bound to a transaction.
type stmtLike interface {
	QueryContext(ctx context.Context, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, args ...any) *sql.Row
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
}

type bound struct {
	tx *sql.Tx
	q  string
}

func (b bound) QueryContext(ctx context.Context, args ...any) (*sql.Rows, error) {
	return b.tx.QueryContext(ctx, b.q, args...)
}

func (b bound) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	return b.tx.QueryRowContext(ctx, b.q, args...)
}

func (b bound) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return b.tx.ExecContext(ctx, b.q, args...)
}
