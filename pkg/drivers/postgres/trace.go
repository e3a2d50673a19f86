package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// tracer passes the text of every statement pgx sends or prepares to rec,
// a statement-list test's recorder (sqltrace): the pools' queries and
// prepared statements, the pipelines', and the side connections'.
type tracer struct{ rec func(string) }

func (t tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.rec(d.SQL)
	return ctx
}

func (t tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (t tracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.rec(d.SQL)
}

func (t tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t tracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	t.rec(d.SQL)
	return ctx
}

func (t tracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

var (
	_ pgx.QueryTracer   = tracer{}
	_ pgx.BatchTracer   = tracer{}
	_ pgx.PrepareTracer = tracer{}
)
