package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// testTools are the modules QuantyKube's test harnesses use (chaos,
// linearizability, lazyfs, the benchmark tool). They live in nested
// modules (ADR-012) so that a program embedding pkg/endpoint, as this one
// does and as k3s embeds kine, inherits none of them.
var testTools = []string{
	"github.com/Shopify/toxiproxy",
	"github.com/hanwen/go-fuse",
	"github.com/anishathalye/porcupine",
	"github.com/rs/zerolog",
}

// TestModuleGraphHasNoTestTools reads `go mod graph` of this program's
// module and of QuantyKube's root module: neither may reach a test tool.
func TestModuleGraphHasNoTestTools(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	for _, dir := range []string{".", "../../.."} {
		cmd := exec.Command(goBin, "mod", "graph")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go mod graph in %s: %v", dir, err)
		}
		if !strings.Contains(string(out), "github.com/quantyroot/quantykube") {
			t.Fatalf("go mod graph in %s does not name quantykube: not the module it should read", dir)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, tool := range testTools {
				if strings.Contains(line, tool+"@") {
					t.Errorf("go mod graph in %s reaches the test tool %s: %q", dir, tool, line)
				}
			}
		}
	}
}
