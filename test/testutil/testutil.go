// Package testutil holds the few helpers that the end-to-end test packages
// (test/history, test/integration, test/crash, test/replica) all need, so
// that a fix to one of them reaches every package instead of one copy. It is
// an ordinary package, not a _test.go file, because test packages cannot
// import each other's test files.
package testutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

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

// Tail is the last n bytes of the log, marked "..." when cut: a failing
// test shows it, and the start of a long log rarely explains the failure.
func (b *LogBuffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// BuildServer builds ./cmd/quantykube into out. It builds at the module root
// that `go env GOMOD` names, because `go test` runs each package in its own
// directory.
func BuildServer(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/quantykube")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building quantykube in %s: %v\n%s", root, err, b)
	}
	return nil
}

// FreeAddr is a loopback host:port that was free a moment ago. Another
// process may take it before the server binds it, so callers that can
// retry with a new address should.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
