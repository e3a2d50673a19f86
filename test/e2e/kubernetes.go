package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
)

// KubernetesVersion is the release of kube-apiserver and
// kube-controller-manager that scripts/kubernetes.sh builds; the client
// libraries of this module are the same release.
const KubernetesVersion = "v1.37.2"

// buildTimeout bounds a cold build of both binaries from the Go module
// proxy on a small shared machine.
const buildTimeout = 40 * time.Minute

var (
	binOnce      sync.Once
	apiserverBin string
	kcmBin       string
	binErr       error
)

// kubernetesBinaries are kube-apiserver and kube-controller-manager,
// built once per machine by scripts/kubernetes.sh (cached under
// .cache/kubernetes), once per test binary looked up.
func kubernetesBinaries() (apiserver, controllerManager string, err error) {
	binOnce.Do(func() {
		root, err := framework.ModuleRoot()
		if err != nil {
			binErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "kubernetes.sh"))
		cmd.Env = append(os.Environ(), "K8S_VERSION="+KubernetesVersion)
		// The build reports its progress on stderr: a cold build takes
		// minutes, and a silent test looks hung.
		var stderr framework.LogBuffer
		cmd.Stderr = io.MultiWriter(&stderr, os.Stderr)
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			binErr = fmt.Errorf("scripts/kubernetes.sh (after %s): %v\n%s", time.Since(start).Round(time.Second), err, stderr.Tail(4000))
			return
		}
		paths := strings.Fields(string(out))
		if len(paths) != 2 {
			binErr = fmt.Errorf("scripts/kubernetes.sh printed %q, want two paths", out)
			return
		}
		for _, p := range paths {
			if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
				binErr = fmt.Errorf("scripts/kubernetes.sh: %s is not an executable", p)
				return
			}
		}
		apiserverBin, kcmBin = paths[0], paths[1]
	})
	return apiserverBin, kcmBin, binErr
}

// Kubectl is the kubectl the checks run: $KUBECTL, else /usr/bin/kubectl,
// else the first on PATH.
func Kubectl() (string, error) {
	if k := os.Getenv("KUBECTL"); k != "" {
		if _, err := exec.LookPath(k); err != nil {
			return "", fmt.Errorf("KUBECTL=%s: %w", k, err)
		}
		return k, nil
	}
	if _, err := os.Stat("/usr/bin/kubectl"); err == nil {
		return "/usr/bin/kubectl", nil
	}
	k, err := exec.LookPath("kubectl")
	if err != nil {
		return "", errors.New("kubectl not found (not at /usr/bin/kubectl nor on PATH; set KUBECTL)")
	}
	return k, nil
}
