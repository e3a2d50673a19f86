// Package replica tests QuantyKube on PostgreSQL with several processes on
// one database, and PostgreSQL going away under load. The processes are
// test/framework targets (Options.Process, Options.Replicas); the database
// is framework.PostgresServer's, reached directly and through PgBouncer in
// transaction mode (subtests postgres and pgbouncer). The restart test stops and starts
// PostgreSQL itself, so it needs the throwaway cluster, not a server named
// by QUANTY_TEST_POSTGRES_DSN. A part that is missing skips a test loudly,
// or fails it under CI=true.
package replica

import (
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
