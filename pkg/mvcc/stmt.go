package mvcc

import (
	"context"
	"database/sql"
	"sync"
)

// statements is the SQL of the store's areas, each area's named and bound
// for its dialect once, when the store (or an import) opens, so that no
// call binds a query at run time. Each area's text stays beside the code
// that runs it; the hot paths' statements (batch.go, history.go) are
// named constants that the reader pool and the write batch prepare
// (prepared, below); what is built per request (range.go's conditions)
// is built by range_sql.go.
type statements struct {
	schema    schemaSQL    // schema.go
	imp       importSQL    // import.go
	regress   regressSQL   // regress.go
	lease     leaseSQL     // lease.go
	retention retentionSQL // retention.go
	budget    budgetSQL    // budget.go
	usage     string       // usage.go
}

func bindStatements(d Dialect) *statements {
	return &statements{
		schema:    bindSchemaSQL(d),
		imp:       bindImportSQL(d),
		regress:   bindRegressSQL(d),
		lease:     bindLeaseSQL(d),
		retention: bindRetentionSQL(d),
		budget:    bindBudgetSQL(d),
		usage:     usageSQL(d),
	}
}

// prepared keeps one prepared statement per SQL text for a pool, so hot
// queries are parsed once per connection instead of once per request.
//
// Statements are prepared only outside transactions (warm): preparing on
// the pool while holding one of its connections in a transaction can wait
// forever for a free connection.
type prepared struct {
	db *sql.DB
	d  Dialect
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newPrepared(db *sql.DB, d Dialect) *prepared {
	return &prepared{db: db, d: d, m: map[string]*sql.Stmt{}}
}

func (c *prepared) lookup(q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[q]
}

// warm prepares the queries not yet prepared. Call it holding no connection
// of the pool.
func (c *prepared) warm(ctx context.Context, qs ...string) error {
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
// statement: History's reads are such queries, and parsing each anew was
// most of their time.
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

func (c *prepared) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = map[string]*sql.Stmt{}
}

// prepTx runs one transaction's queries (written with ? placeholders)
// through prepared statements: the pool's when prepared, or statements
// prepared on the transaction itself, or none (local nil: the query is
// bound and sent as it is). With local set (a SQLite write batch, where
// one statement serves every request), the transaction's statements are
// kept there for its lifetime.
type prepTx struct {
	tx    *sql.Tx
	p     *prepared
	local map[string]*sql.Stmt
}

// stmt is where query q runs: its prepared statement, or the transaction
// with the query bound.
func (t prepTx) stmt(ctx context.Context, q string) stmtLike {
	if st, ok := t.local[q]; ok {
		return st
	}
	if st := t.p.lookup(q); st != nil {
		// Tx.StmtContext makes a new transaction statement on every call
		// (registered with the pool and the transaction until it ends):
		// a batch that runs the statement for each of its requests keeps
		// the first.
		txst := t.tx.StmtContext(ctx, st)
		if t.local != nil {
			t.local[q] = txst
		}
		return txst
	}
	if t.local == nil {
		return bound{tx: t.tx, q: t.p.d.Bind(q)}
	}
	st, err := t.tx.PrepareContext(ctx, t.p.d.Bind(q))
	if err != nil {
		return unprepared{bound: bound{tx: t.tx, q: t.p.d.Bind(q)}, err: err}
	}
	t.local[q] = st
	return st
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

// stmtLike is a *sql.Stmt, or a query bound to a transaction.
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

// unprepared is a query whose preparation failed: its error, except for a
// single row, which database/sql cannot build carrying an error, so the
// query runs unprepared and surfaces the error from Scan.
type unprepared struct {
	bound
	err error
}

func (u unprepared) QueryContext(context.Context, ...any) (*sql.Rows, error) { return nil, u.err }
func (u unprepared) ExecContext(context.Context, ...any) (sql.Result, error) { return nil, u.err }

// binder runs queries written with ? placeholders on a connection, bound
// for the dialect: the replica batch's, where pgx keeps a prepared
// statement per query and connection already.
type binder struct {
	on Querier
	d  Dialect
}

func (b binder) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return b.on.QueryContext(ctx, b.d.Bind(q), args...)
}

func (b binder) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return b.on.QueryRowContext(ctx, b.d.Bind(q), args...)
}

func (b binder) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return b.on.ExecContext(ctx, b.d.Bind(q), args...)
}
