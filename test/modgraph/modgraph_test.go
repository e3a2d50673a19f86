// Package modgraph checks what a program embedding QuantyKube inherits:
// the module graph of this module (which such a program resolves with
// it) and of test/conformance's k3sembed (QuantyKube embedded through
// pkg/endpoint as k3s embeds kine). The test harnesses' tools live in
// nested modules (ADR-012), and so does the kubectl plugin, with
// cli-runtime, cobra and kustomize (ADR-040).
package modgraph

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// testTools are the modules QuantyKube's test harnesses use (chaos,
// linearizability, lazyfs, the benchmark tool).
var testTools = []string{
	"github.com/Shopify/toxiproxy",
	"github.com/hanwen/go-fuse",
	"github.com/anishathalye/porcupine",
	"github.com/rs/zerolog",
}

// pluginOnly are the modules kubectl-quanty needs and the rest does not.
var pluginOnly = []string{
	"k8s.io/cli-runtime",
	"github.com/spf13/cobra",
	"sigs.k8s.io/kustomize/api",
	"sigs.k8s.io/kustomize/kyaml",
}

// goCmd runs go with args in dir: its standard output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("reading the module graph needs the go command: %v", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return string(out)
}

const (
	root     = "../.."
	k3sembed = "../conformance"
	plugin   = "../../cmd/kubectl-quanty"
)

// Neither this module's graph nor the embedding program's reaches a test
// tool.
func TestModuleGraphHasNoTestTools(t *testing.T) {
	for _, dir := range []string{root, k3sembed} {
		out := goCmd(t, dir, "mod", "graph")
		if !strings.Contains(out, "github.com/quantyroot/quantykube") {
			t.Fatalf("go mod graph in %s does not name quantykube: not the module it should read", dir)
		}
		for _, line := range strings.Split(out, "\n") {
			for _, tool := range testTools {
				if strings.Contains(line, tool+"@") {
					t.Errorf("go mod graph in %s reaches the test tool %s: %q", dir, tool, line)
				}
			}
		}
	}
}

// requires are the modules a go.mod requires, directly or not.
func requires(t *testing.T, dir string) map[string]bool {
	t.Helper()
	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal([]byte(goCmd(t, dir, "mod", "edit", "-json")), &mod); err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, r := range mod.Require {
		m[r.Path] = true
	}
	return m
}

// The plugin's own dependencies stay in its module: this module's go.mod
// requires none of them, no package of them is built into a program that
// embeds pkg/endpoint, and of the module graph an embedder resolves, only
// cobra remains, as kube-apiserver's libraries' requirement and bbolt's
// (its command's, ADR-051), which build none of it into the embedder.
func TestModuleGraphHasNoPluginModules(t *testing.T) {
	mine, theirs := requires(t, root), requires(t, plugin)
	for _, m := range pluginOnly {
		if mine[m] {
			t.Errorf("go.mod requires %s, which only kubectl-quanty (its own module, cmd/kubectl-quanty) needs", m)
		}
		if !theirs[m] {
			t.Errorf("cmd/kubectl-quanty/go.mod does not require %s: this test's list is out of date", m)
		}
	}
	for _, line := range strings.Split(goCmd(t, root, "mod", "graph"), "\n") {
		from, to, _ := strings.Cut(line, " ")
		for _, m := range pluginOnly {
			if !strings.HasPrefix(to, m+"@") {
				continue
			}
			if m != "github.com/spf13/cobra" || !strings.HasPrefix(from, "k8s.io/") && !strings.HasPrefix(from, "go.etcd.io/bbolt@") {
				t.Errorf("go mod graph reaches %s: %q", m, line)
			}
		}
	}
	for _, pkg := range strings.Fields(goCmd(t, root, "list", "-deps", "./pkg/endpoint")) {
		for _, m := range pluginOnly {
			if pkg == m || strings.HasPrefix(pkg, m+"/") {
				t.Errorf("a program embedding pkg/endpoint builds %s", pkg)
			}
		}
	}
}

// The web page's decoder links every built-in API type, whose packages
// cost a server memory from its start (ADR-047): neither quantykube nor a
// program embedding pkg/endpoint builds any of them (an embedder may set
// apiagg.Config.DecodeValue itself), and kubectl-quanty, whose ui proxy
// decodes the values the server sends as stored, builds the decoder.
func TestEmbedderLinksNoAPITypes(t *testing.T) {
	const decoder, scheme = "github.com/quantyroot/quantykube/pkg/apiagg/uidecode", "k8s.io/client-go/kubernetes/scheme"
	for _, dir := range []string{"./pkg/endpoint", "./cmd/quantykube"} {
		for _, pkg := range strings.Fields(goCmd(t, root, "list", "-deps", dir)) {
			if pkg == decoder || pkg == scheme || pkg == "k8s.io/api/core/v1" {
				t.Errorf("%s builds %s", dir, pkg)
			}
		}
	}
	if deps := " " + strings.Join(strings.Fields(goCmd(t, plugin, "list", "-deps", ".")), " ") + " "; !strings.Contains(deps, " "+decoder+" ") {
		t.Errorf("kubectl-quanty does not build %s: kubectl quanty ui could not show built-in objects", decoder)
	}
}

// The etcd snapshot writer (ADR-051) and bbolt are quantykube export's: a
// program embedding pkg/endpoint builds neither.
func TestEmbedderLinksNoSnapshotWriter(t *testing.T) {
	const writer, bbolt = "github.com/quantyroot/quantykube/pkg/etcdsnap", "go.etcd.io/bbolt"
	for _, pkg := range strings.Fields(goCmd(t, root, "list", "-deps", "./pkg/endpoint")) {
		if pkg == writer || pkg == bbolt || strings.HasPrefix(pkg, bbolt+"/") {
			t.Errorf("a program embedding pkg/endpoint builds %s", pkg)
		}
	}
	if deps := " " + strings.Join(strings.Fields(goCmd(t, root, "list", "-deps", "./cmd/quantykube")), " ") + " "; !strings.Contains(deps, " "+writer+" ") {
		t.Errorf("quantykube does not build %s: export --etcd-snapshot could not write", writer)
	}
}
