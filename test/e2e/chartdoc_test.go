package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/test/framework"
)

// helmDocs are the chart's pages, from the module root: the overview,
// then one page per shape. The sh blocks they mark with runMarker, on the
// line before, are run as they are written by chart-docs, in this order.
var helmDocs = append([]string{"docs/helm.md"}, shapePages()...)

const runMarker = "<!-- test: run -->"

// shapePages are the pages of the shapes, in chartShapes' order.
func shapePages() []string {
	pages := make([]string, len(chartShapes))
	for i, shape := range chartShapes {
		pages[i] = "docs/helm/" + shape + ".md"
	}
	return pages
}

// chartBlock is a marked sh block: its page and its text.
type chartBlock struct{ page, text string }

// runBlocks are the sh blocks of the given pages marked runMarker, in
// order.
func runBlocks(t testing.TB, pages ...string) []chartBlock {
	t.Helper()
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var blocks []chartBlock
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatalf("the chart's page: %v", err)
		}
		marked, err := framework.DocBlocks(page, string(b))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range marked {
			if m.Marker != runMarker {
				t.Fatalf("%s:%d: %s: the chart's pages mark blocks %s only", page, m.Line, m.Marker, runMarker)
			}
			blocks = append(blocks, chartBlock{page: page, text: m.Text})
		}
	}
	return blocks
}

// TestChartDocBlocks: each shape's page runs an install of its shape, and
// every install the pages run is uninstalled, so that chart-docs proves
// each shape's commands.
func TestChartDocBlocks(t *testing.T) {
	for _, shape := range chartShapes {
		page := "docs/helm/" + shape + ".md"
		var text strings.Builder
		for _, b := range runBlocks(t, page) {
			text.WriteString(b.text)
		}
		if all := text.String(); !strings.Contains(all, "helm install ") || !strings.Contains(all, "--set mode="+shape+" ") {
			t.Errorf("%s runs no helm install with --set mode=%s", page, shape)
		}
	}
	var all strings.Builder
	for _, b := range runBlocks(t, helmDocs...) {
		all.WriteString(b.text)
	}
	if i, u := strings.Count(all.String(), "helm install "), strings.Count(all.String(), "helm uninstall "); i != u {
		t.Errorf("the chart's pages run %d installs and %d uninstalls: every install they run must be undone", i, u)
	}
}

// checkChartDocs runs the page's marked blocks, as they are written, with
// bash against the cluster: KUBECONFIG the admin's, helm, kubectl and
// quantykube first on PATH, in a directory of the test's own where
// deploy/ is the checkout's, STORE_ADDRESS an address of a network
// namespace of the test's own. Each must succeed; kube-apiserver accepting
// the installs is the check (no kubelet runs their pods, though the
// Deployments' pods are made, where Pod Security admits them). Afterwards
// no release is left, and the aggregated API is no longer registered.
func checkChartDocs(t *testing.T, c *Cluster) {
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := Helm()
	if err != nil {
		t.Fatalf("the chart's checks need helm %s: %v", HelmVersion, err)
	}
	work := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "deploy"), filepath.Join(work, "deploy")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"helm": helm, "kubectl": c.kubectl, "quantykube": framework.Binary(t)} {
		abs, err := filepath.Abs(target)
		if err == nil {
			err = os.Symlink(abs, filepath.Join(bin, name))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The external store's address: one of a network namespace of the
	// test's own, where nothing listens, so that kube-apiserver's checks of
	// the APIService reach no other host.
	store := NewNetns(t)
	env := []string{"STORE_ADDRESS=" + store.NSIP.String(), "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECACHEDIR=" + filepath.Join(work, "kubectl-cache"), "KUBERC=off"}
	for _, kv := range helmEnv(filepath.Join(work, "helm"), c.Kubeconfig) {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "KUBECACHEDIR=") && !strings.HasPrefix(kv, "KUBERC=") {
			env = append(env, kv)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := c.Kube.CoreV1().Namespaces().Delete(ctx, "quantykube", metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace quantykube: %v", err)
		}
	})
	blocks := runBlocks(t, helmDocs...)
	if len(blocks) == 0 {
		t.Fatalf("%v mark no block to run", helmDocs)
	}
	for i, block := range blocks {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block.text)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = work, env, &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%s, block %d:\n%s\nfailed after %s: %v\n%s", block.page, i+1, block.text, time.Since(start).Round(time.Millisecond), err, out.String())
		}
		t.Logf("%s, block %d (%s):\n%s%s", block.page, i+1, time.Since(start).Round(time.Millisecond), block.text, out.String())
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), helm, "list", "--all-namespaces", "--short", "--deployed", "--failed", "--pending", "--uninstalling")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &stderr
	if err := cmd.Run(); err != nil || len(bytes.TrimSpace(out.Bytes())) != 0 {
		t.Errorf("releases left after the page's commands (%v): %s%s", err, out.String(), stderr.String())
	}
	if _, err := c.Dynamic.Resource(apiServices).Get(c.Ctx(t), APIServiceName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the APIService is still registered after the page's uninstalls: %v", err)
	}
}
