package mvcc

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache keeps one prepared statement per SQL text for a pool, so hot
// queries are parsed once per connection instead of once per request.
//
// Statements are prepared only outside transactions (warm): preparing on
// the pool while holding one of its connections in a transaction can wait
// forever for a free connection.
type stmtCache struct {
	db *sql.DB
	d  Dialect
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB, d Dialect) *stmtCache {
	return &stmtCache{db: db, d: d, m: map[string]*sql.Stmt{}}
}

func (c *stmtCache) lookup(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[q]
}

// warm prepares the queries not yet cached. Call it holding no connection
// of the pool.
func (c *stmtCache) warm(ctx context.Context, qs ...string) error {
	for _, q := range qs {
		if c.lookup(q) != nil {
			continue
		}
		st, err := c.db.PrepareContext(ctx, c.d.Bind(q))
		if err != nil {
			return err
		}
		c.mu.Lock()
		if old := c.m[q]; old != nil {
			st.Close()
		} else {
			c.m[q] = st
		}
		c.mu.Unlock()
	}
	return nil
}

// readRow runs a one-row query on the reader pool through a prepared
// statement: History's Get and the floors it checks are four such queries,
// and parsing each anew was most of a Get's time.
func (s *Store) readRow(ctx context.Context, q string, args ...any) *sql.Row {
	if err := s.rstmts.warm(ctx, q); err == nil {
		if st := s.rstmts.lookup(q); st != nil { // nil once the store closes
			return st.QueryRowContext(ctx, args...)
		}
	}
	// database/sql cannot build a Row carrying an error; the unprepared
	// query surfaces it from Scan.
	return s.rdb.QueryRowContext(ctx, s.d.Bind(q), args...)
}

// readRows is readRow for queries of many rows.
func (s *Store) readRows(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := s.rstmts.warm(ctx, q); err != nil {
		return nil, err
	}
	st := s.rstmts.lookup(q)
	if st == nil {
		return nil, ErrClosed
	}
	return st.QueryContext(ctx, args...)
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}

// cachedTx runs one transaction's queries (written with ? placeholders)
// through prepared statements: the pool's cache when warm, or statements
// prepared on the transaction itself and kept for its lifetime (the
// writer's batches, where one statement serves every request).
type cachedTx struct {
	tx    *sql.Tx
	c     *stmtCache
	local map[string]*sql.Stmt // nil: do not prepare inside the transaction
}

func (t cachedTx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st := t.c.lookup(q); st != nil {
		return t.tx.StmtContext(ctx, st), nil
	}
	if t.local == nil {
		return nil, nil
	}
	if st, ok := t.local[q]; ok {
		return st, nil
	}
	st, err := t.tx.PrepareContext(ctx, t.c.d.Bind(q))
	if err != nil {
		return nil, err
	}
	t.local[q] = st
	return st, nil
}

func (t cachedTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return t.tx.QueryContext(ctx, t.c.d.Bind(q), args...)
	}
	return st.QueryContext(ctx, args...)
}

func (t cachedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := t.stmt(ctx, q)
	if err != nil || st == nil {
		// database/sql cannot build a Row carrying an error; the unprepared
		// query surfaces any error from Scan.
		return t.tx.QueryRowContext(ctx, t.c.d.Bind(q), args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (t cachedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return t.tx.ExecContext(ctx, t.c.d.Bind(q), args...)
	}
	return st.ExecContext(ctx, args...)
}
