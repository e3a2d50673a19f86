package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
)

// pluginBin is a directory of the cluster's own, first on the PATH of
// Shell: it holds kubectl-quanty, built from this checkout, where kubectl
// finds its plugins, and the kubectl the checks run, as "kubectl", which
// the plugin runs (the machine's kubectl, if any, may be of another
// release).
func (c *Cluster) pluginBin(t testing.TB) string {
	t.Helper()
	if c.pluginDir != "" {
		return c.pluginDir
	}
	dir := filepath.Join(c.dir, "plugin-bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("the plugin's PATH directory: %v", err)
	}
	for name, target := range map[string]string{"kubectl-quanty": framework.Command(t, "kubectl-quanty"), "kubectl": c.kubectl} {
		abs, err := exec.LookPath(target)
		if err == nil {
			abs, err = filepath.Abs(abs)
		}
		if err == nil {
			err = os.Symlink(abs, filepath.Join(dir, name))
		}
		if err != nil {
			t.Fatalf("the plugin's PATH directory: %s: %v", name, err)
		}
	}
	c.pluginDir = dir
	return dir
}

// ShellResult is what a command line printed, and its exit status.
type ShellResult struct {
	Stdout, Stderr string
	Code           int
}

func (r ShellResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Shell runs kubectl ARGS as a person runs it from a shell: the kubeconfig
// in KUBECONFIG (the admin's when kubeconfig is empty), kubectl-quanty and
// kubectl first on PATH (pluginBin), stdin as its standard input. kubectl
// replaces itself with a plugin, so the exit status is the plugin's. No
// KUBE* setting of the caller's environment reaches it (a kuberc, an
// external diff program), and the discovery cache is the cluster's. The
// run is bounded; one that cannot start or is killed fails t.
func (c *Cluster) Shell(t testing.TB, kubeconfig, stdin string, args ...string) ShellResult {
	t.Helper()
	env := c.shellEnv(t, kubeconfig)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.kubectl, args...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	r := ShellResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("kubectl %s: not done within its bound: %v\n%s", strings.Join(args, " "), err, r)
	case errors.As(err, &ee) && ee.Exited():
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, r)
	}
	return r
}

// shellEnv is Shell's environment: kubeconfig (the admin's when empty) in
// KUBECONFIG, the plugin and kubectl first on PATH, no KUBE* setting of the
// caller's.
func (c *Cluster) shellEnv(t testing.TB, kubeconfig string) []string {
	t.Helper()
	if kubeconfig == "" {
		kubeconfig = c.Kubeconfig
	}
	env := []string{
		"PATH=" + c.pluginBin(t) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"KUBECONFIG=" + kubeconfig,
		"KUBECACHEDIR=" + filepath.Join(c.dir, "kubectl-cache"),
		"KUBERC=off",
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBE") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return env
}
