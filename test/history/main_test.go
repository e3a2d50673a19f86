package history

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/test/testutil"
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
	if err := testutil.BuildServer(quantykubeBin); err != nil {
		fmt.Fprintf(os.Stderr, "history: %v\n", err)
		_ = os.RemoveAll(tmp)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}
