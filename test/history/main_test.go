package history

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// quantykubeBin is the quantykube binary the CLI tests run, built by
// TestMain (unless -short).
var quantykubeBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	tmp, err := os.MkdirTemp("", "quantykube-history-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "history: temp dir: %v\n", err)
		os.Exit(1)
	}
	quantykubeBin = filepath.Join(tmp, "quantykube")
	if err := build(quantykubeBin); err != nil {
		fmt.Fprintf(os.Stderr, "history: %v\n", err)
		_ = os.RemoveAll(tmp)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

// build runs `go build -o out ./cmd/quantykube` at the module root.
func build(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %v", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/quantykube")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building quantykube in %s: %v\n%s", cmd.Dir, err, b)
	}
	return nil
}
