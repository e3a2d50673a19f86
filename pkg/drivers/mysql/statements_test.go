package mysql_test

import (
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
	"github.com/quantyroot/quantykube/pkg/internal/sqltrace/sqltracetest"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// Every statement the dialect sends is one it names: the engine's, the
// schema's or its own (sqltracetest), alone or in a multi-statement
// query. A batch's rows are the one thing it writes as it sends them.
func TestStatementsAreNamed(t *testing.T) {
	sqltracetest.Run(t, sqltracetest.Case{
		New: func(t *testing.T) func() mvcc.Dialect {
			dsn := framework.MySQLDatabase(t)
			return func() mvcc.Dialect { return dialectFor(t, dsn) }
		},
		Replicas: true,
		Own:      mysql.OwnStatements,
		Made:     mysql.RowStatements,
		Split:    mysql.Separator,
	})
}
