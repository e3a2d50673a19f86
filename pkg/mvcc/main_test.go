package mvcc_test

import (
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

// TestMain removes what the framework started for the tail tests (their
// throwaway PostgreSQL) once the package's tests end.
func TestMain(m *testing.M) { framework.Main(m) }
