package testing

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/quantyroot/quantykube/test/framework"
)

// RealKubectlPath is the kubectl the tests of the real one run: $KUBECTL (CI
// sets it to kubectl v1.37.2, built from the module proxy), else the first
// on PATH; a test without one is skipped loudly (a failure under CI=true).
func (c *Cluster) RealKubectlPath() string {
	c.T.Helper()
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = "kubectl"
	}
	real, err := exec.LookPath(kubectl)
	if err != nil {
		framework.Unavailable(c.T, "kubectl", err)
	}
	return real
}

// KubeAPIServer stands in front of the cluster for a real kubectl: it
// serves /version, the discovery documents, and forwards the aggregated
// API's paths, as kube-apiserver's aggregator does, with the impersonated
// user (--as) as the caller, the admin without one. It makes the
// kubeconfig of a context on it (namespace shop) KUBECONFIG, a directory
// holding the real kubectl, as "kubectl", the first on PATH, and
// kubectl's discovery cache the cluster's (KUBECACHEDIR; no kuberc). The count is of requests that
// carried kubectl's --request-timeout.
func (c *Cluster) KubeAPIServer() (url string, timeouts *atomic.Int32) {
	c.T.Helper()
	real := c.RealKubectlPath()
	c.RealKubectl = true
	timeouts = new(atomic.Int32)
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
			return
		}
		// kubectl's --request-timeout, as a parameter of every request.
		q := r.URL.Query()
		if q.Get("timeout") != "" {
			timeouts.Add(1)
			q.Del("timeout")
		}
		path := r.URL.Path
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		body, _ := io.ReadAll(r.Body)
		status, answer, err := c.Answer(r.Context(), r.Method, path, body, r.Header.Get("Impersonate-User"), r.Header.Values("Impersonate-Group"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if strings.HasPrefix(string(answer), "{") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		w.Write(answer)
	}))
	c.T.Cleanup(apiserver.Close)
	kubeconfig := filepath.Join(c.Dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: "`+apiserver.URL+`"}
users:
- name: u
  user: {token: t0k3n}
contexts:
- name: fake
  context: {cluster: fake, user: u, namespace: shop}
current-context: fake
`), 0o600); err != nil {
		c.T.Fatal(err)
	}
	bin := filepath.Join(c.Dir, "real")
	if err := os.Mkdir(bin, 0o755); err != nil {
		c.T.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(bin, "kubectl")); err != nil {
		c.T.Fatal(err)
	}
	c.T.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	c.T.Setenv("KUBECONFIG", kubeconfig)
	c.T.Setenv("KUBECACHEDIR", filepath.Join(c.Dir, "kubectl-cache"))
	c.T.Setenv("KUBERC", "off")
	return apiserver.URL, timeouts
}
