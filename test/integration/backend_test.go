package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/pgtest"
)

// The suite is one matrix over the storage backends: `go test` runs every
// test on SQLite, then runs this same test binary again with
// QUANTY_TEST_BACKEND=postgres, where every test server gets a fresh
// PostgreSQL database (QUANTY_TEST_POSTGRES_DSN, or a throwaway cluster
// started here when the server binaries exist). Without PostgreSQL the
// second pass is skipped loudly, and under CI=true it fails instead.
const envBackend = "QUANTY_TEST_BACKEND"

func backend() string {
	if b := os.Getenv(envBackend); b != "" {
		return b
	}
	return "sqlite"
}

func TestMain(m *testing.M) {
	switch backend() {
	case "postgres":
		if os.Getenv(pgtest.EnvDSN) == "" {
			fmt.Fprintf(os.Stderr, "%s=postgres needs %s\n", envBackend, pgtest.EnvDSN)
			os.Exit(2)
		}
		fmt.Println("=== backend: postgres")
		os.Exit(m.Run())
	case "sqlite":
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want sqlite or postgres\n", envBackend, backend())
		os.Exit(2)
	}
	code := m.Run()
	if isEtcd() || os.Getenv("QUANTY_TEST_SKIP_POSTGRES") == "1" {
		os.Exit(code)
	}
	if pg := runPostgresPass(); pg != 0 && code == 0 {
		code = pg
	}
	os.Exit(code)
}

// runPostgresPass runs this test binary again against PostgreSQL.
func runPostgresPass() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := pgtest.Open(ctx)
	cancel()
	if err != nil {
		msg := fmt.Sprintf("POSTGRES TESTS SKIPPED: %v", err)
		fmt.Fprintf(os.Stderr, "\n%s\n## %s\n%s\n\n", bar, msg, bar)
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "## CI=true: failing instead of skipping")
			return 1
		}
		return 0
	}
	defer srv.Close()
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), envBackend+"=postgres", pgtest.EnvDSN+"="+srv.AdminDSN)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "--- FAIL: integration suite on postgres: %v\n", err)
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			return ee.ExitCode()
		}
		return 1
	}
	return 0
}

const bar = "##################################################################"

var pgDatabases sync.Map // dbPath -> DSN, so a restart finds its database

// endpointFor is the database a test server at dbPath uses on the current
// backend: the SQLite file, or a PostgreSQL database made for it.
func endpointFor(t *testing.T, dbPath string) string {
	t.Helper()
	if backend() != "postgres" {
		return "sqlite://" + dbPath
	}
	if dsn, ok := pgDatabases.Load(dbPath); ok {
		return dsn.(string)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := os.Getenv(pgtest.EnvDSN)
	dsn, err := pgtest.CreateDatabase(ctx, admin, t.Name())
	if err != nil {
		t.Fatalf("postgres test database: %v", err)
	}
	pgDatabases.Store(dbPath, dsn)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pgtest.DropDatabase(ctx, admin, dsn)
	})
	return dsn
}
