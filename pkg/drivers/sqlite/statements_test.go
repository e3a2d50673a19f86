package sqlite_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/internal/sqltrace/sqltracetest"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Every statement the dialect sends is one it names: the engine's, the
// schema's or its own (sqltracetest).
func TestStatementsAreNamed(t *testing.T) {
	dir, n := t.TempDir(), 0
	sqltracetest.Run(t, sqltracetest.Case{
		New: func(t *testing.T) func() mvcc.Dialect {
			n++
			path := filepath.Join(dir, fmt.Sprint(n, ".db"))
			return func() mvcc.Dialect { return dialect(t, path) }
		},
		Own: sqlite.OwnStatements,
	})
}
