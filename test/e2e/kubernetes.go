package e2e

import (
	"context"
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

// buildTimeout bounds a cold build of the three binaries from the Go
// module proxy on a small shared machine.
const buildTimeout = 40 * time.Minute

var (
	binOnce      sync.Once
	apiserverBin string
	kcmBin       string
	kubectlBin   string
	binErr       error
)

// kubernetesBinaries are kube-apiserver, kube-controller-manager and
// kubectl of KubernetesVersion, built once per machine by
// scripts/kubernetes.sh (cached under .cache/kubernetes), once per test
// binary looked up. kubectl is built rather than taken from the machine:
// kubectl supports one minor version of skew, and a distribution's kubectl
// is years older than the apiserver under test.
func kubernetesBinaries() (apiserver, controllerManager, kubectl string, err error) {
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
		if len(paths) != 3 {
			binErr = fmt.Errorf("scripts/kubernetes.sh printed %q, want three paths", out)
			return
		}
		for _, p := range paths {
			if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
				binErr = fmt.Errorf("scripts/kubernetes.sh: %s is not an executable", p)
				return
			}
		}
		apiserverBin, kcmBin, kubectlBin = paths[0], paths[1], paths[2]
	})
	return apiserverBin, kcmBin, kubectlBin, binErr
}

// Kubectl is the kubectl the checks run: $KUBECTL (to check another
// client against the cluster), else the one built with the cluster's
// binaries.
func Kubectl() (string, error) {
	if k := os.Getenv("KUBECTL"); k != "" {
		if _, err := exec.LookPath(k); err != nil {
			return "", fmt.Errorf("KUBECTL=%s: %w", k, err)
		}
		return k, nil
	}
	_, _, k, err := kubernetesBinaries()
	return k, err
}
