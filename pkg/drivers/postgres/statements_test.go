package postgres_test

import (
	"regexp"
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/postgres"
	"github.com/quantyroot/quantykube/pkg/internal/sqltrace/sqltracetest"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// Every statement the dialect sends is one it names: the engine's, the
// schema's or its own (sqltracetest), on PostgreSQL and through
// PgBouncer. A LISTEN probe's channel is the one name it writes as it
// sends it.
func TestStatementsAreNamed(t *testing.T) {
	framework.Run(t, framework.OnPostgres, func(t *testing.T, b framework.Backend) {
		sqltracetest.Run(t, sqltracetest.Case{
			New: func(t *testing.T) func() mvcc.Dialect {
				dsn := framework.PostgresDatabase(t)
				if b == framework.PgBouncer {
					_, dsn = pooledDatabase(t)
				}
				return func() mvcc.Dialect { return dialectFor(t, dsn) }
			},
			Replicas: true,
			Own:      postgres.OwnStatements,
			Made:     []*regexp.Regexp{regexp.MustCompile(`^(UN)?LISTEN quantykube_probe_[0-9a-f]+$`)},
		})
	})
}
