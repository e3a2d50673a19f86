// Package framework starts the servers that QuantyKube's end-to-end suites
// (test/integration, test/history, test/replica, test/crash, and the nested
// modules test/conformance and test/e2e) run against, behind one Target:
//
//   - QuantyKube in this process, on SQLite or on a PostgreSQL or MariaDB
//     database;
//   - QuantyKube as child processes (the binary Binary builds), on SQLite or
//     on one PostgreSQL or MariaDB database shared by several replicas,
//     which can be killed with SIGKILL;
//   - a real etcd binary (EtcdBinary builds it from the Go module proxy), the
//     reference the same assertions are checked against;
//   - a real kine binary (KineBinary, StartKine), a source the import tests
//     write through.
//
// A suite runs a test once per backend with Run, so each backend is a
// subtest (TestWatch/sqlite, TestWatch/postgres, TestWatch/etcd) that can be
// run alone with -run and is named in go test -json.
//
// A backend that cannot run here (no PostgreSQL, etcd not buildable) is
// skipped with a loud message, except under CI=true, where it fails the test:
// CI must never pass because a part did not run. Packages that use the
// framework call Main from their TestMain so that what it started (a
// throwaway PostgreSQL cluster, built binaries) is removed at the end.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Backend names a kind of server under test.
type Backend string

const (
	SQLite   Backend = "sqlite"
	Postgres Backend = "postgres"
	// PgBouncer is QuantyKube on PostgreSQL through a PgBouncer in
	// transaction mode with its default settings (pgtest.StartPgBouncer).
	PgBouncer Backend = "pgbouncer"
	// MySQL is QuantyKube on MariaDB (mytest: a throwaway Debian
	// mariadb-server, or QUANTY_TEST_MYSQL_DSN's server).
	MySQL Backend = "mysql"
	Etcd  Backend = "etcd"
)

var (
	// All is QuantyKube on each database it serves, and etcd (WithPooler
	// adds PostgreSQL behind PgBouncer).
	All = []Backend{SQLite, Postgres, MySQL, Etcd}
	// QuantyKube is QuantyKube's backends only, for what etcd does not have
	// (History, retention, replicas) or does differently on purpose.
	QuantyKube = []Backend{SQLite, Postgres, MySQL}
	// WithPooler is All and QuantyKube on PostgreSQL through PgBouncer,
	// for the suites that must also hold behind a pooler
	// (test/integration).
	WithPooler = []Backend{SQLite, Postgres, PgBouncer, MySQL, Etcd}
	// OnPostgres is QuantyKube on PostgreSQL, directly and through
	// PgBouncer (test/replica).
	OnPostgres = []Backend{Postgres, PgBouncer}
	// Replicated is every database several replicas can serve: PostgreSQL,
	// directly and through PgBouncer, and MariaDB (test/replica).
	Replicated = []Backend{Postgres, PgBouncer, MySQL}
)

// IsQuantyKube reports whether b is QuantyKube (on any database).
func (b Backend) IsQuantyKube() bool { return b == SQLite || b.IsPostgres() || b == MySQL }

// IsShared reports whether b is QuantyKube on a database several replicas
// may serve (PostgreSQL, directly or through PgBouncer, or MariaDB).
func (b Backend) IsShared() bool { return b.IsPostgres() || b == MySQL }

// IsPostgres reports whether b is QuantyKube on PostgreSQL (directly or
// through PgBouncer).
func (b Backend) IsPostgres() bool { return b == Postgres || b == PgBouncer }

// Run runs f as one subtest per backend, named after it. A backend that
// cannot run here is skipped loudly, or fails the subtest under CI=true.
func Run(t *testing.T, backends []Backend, f func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			Require(t, b)
			f(t, b)
		})
	}
}

// Require stops t unless backend b can run here: it starts the shared
// PostgreSQL for Postgres, and builds etcd for Etcd.
func Require(t testing.TB, b Backend) {
	t.Helper()
	switch b {
	case Postgres:
		if _, err := postgresServer(); err != nil {
			Unavailable(t, "PostgreSQL", err)
		}
	case PgBouncer:
		if _, err := postgresServer(); err != nil {
			Unavailable(t, "PostgreSQL", err)
		}
		if _, err := pgBouncer(); err != nil {
			Unavailable(t, "PgBouncer", err)
		}
	case MySQL:
		if _, err := mysqlServer(); err != nil {
			Unavailable(t, "MariaDB", err)
		}
	case Etcd:
		if _, err := etcdBinary(); err != nil {
			Unavailable(t, "etcd", err)
		}
	case SQLite:
	default:
		t.Fatalf("unknown backend %q", b)
	}
}

// InCI reports whether the tests run under CI (CI=true), where nothing may
// be skipped for want of a part.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable ends t because a part it needs is missing: a failure under
// CI=true, otherwise a skip printed where nobody can miss it.
func Unavailable(t testing.TB, part string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s TESTS NOT RUN: %s: %v", strings.ToUpper(part), t.Name(), err)
	if InCI() {
		t.Fatalf("%s (CI=true: a missing part fails the run)", msg)
	}
	fmt.Fprintf(os.Stderr, "\n%s\n## %s\n%s\n", bar, msg, bar)
	t.Skip(msg)
}

const bar = "##################################################################"

// Main runs the package's tests, then removes what the framework started
// for them. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	cleanupAll()
	os.Exit(code)
}

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// atExit registers f to run when Main ends (last registered, first run).
func atExit(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

func cleanupAll() {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

// LogBuffer collects a server's log. A server writes to it from its own
// goroutines while the test reads it, hence the lock.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is the whole log.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail is the last n bytes of the log, marked "..." when cut: a failing
// test shows it, and the start of a long log rarely explains the failure.
func (b *LogBuffer) Tail(n int) string {
	s := b.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// ModuleRoot is the directory of QuantyKube's go.mod, found from the
// working directory upwards (go test runs each package in its own
// directory; nested modules such as test/conformance sit inside it).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/quantyroot/quantykube\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no QuantyKube go.mod above the working directory")
		}
		dir = parent
	}
}

// build is one command of this checkout, built at most once per test
// binary.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

// Binary is the quantykube binary built from this checkout, once per test
// binary, into a temporary directory that Main removes.
func Binary(t testing.TB) string {
	t.Helper()
	return Command(t, "quantykube")
}

// Command is ./cmd/NAME built from this checkout (in its own module if it
// has one), once per test binary, as
// the only file of a temporary directory that Main removes: a test can put
// the directory first on a PATH (kubectl finds its plugins there).
func Command(t testing.TB, name string) string {
	t.Helper()
	buildsMu.Lock()
	b := builds[name]
	if b == nil {
		b = &build{}
		builds[name] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.path, b.err = buildCommand(name) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func buildCommand(name string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", name+"-bin-")
	if err != nil {
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	atExit(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out := filepath.Join(dir, name)
	// A command that is a module of its own (cmd/kubectl-quanty, ADR-040)
	// is built in its directory.
	pkg, in := "./cmd/"+name, root
	if _, err := os.Stat(filepath.Join(root, "cmd", name, "go.mod")); err == nil {
		pkg, in = ".", filepath.Join(root, "cmd", name)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = in
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s in %s: %v\n%s", name, in, err, b)
	}
	return out, nil
}
