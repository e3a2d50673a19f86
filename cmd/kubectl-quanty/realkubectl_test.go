package main

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
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

// The plugin with the real kubectl: a fake kube-apiserver serves the
// discovery documents and forwards the aggregated API's paths, as the
// aggregator does, with the impersonated user as the caller. This proves
// what the fake kubectl assumes of the real one: get --raw copies the
// answer, create --raw -f - sends standard input, errors are printed as
// "Error from server (Reason): message", the flags are kubectl's.
//
// The kubectl is $KUBECTL (CI sets it to kubectl v1.37.2, built from the
// module proxy), else the first on PATH.
func TestRealKubectl(t *testing.T) {
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = "kubectl"
	}
	real, err := exec.LookPath(kubectl)
	if err != nil {
		framework.Unavailable(t, "kubectl", err)
	}
	c := newCluster(t)
	key, revs, values := edits(t, c)
	var timeouts atomic.Int32
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
		status, answer, err := fakeAnswer(r.Method, path, body, r.Header.Get("Impersonate-User"), r.Header.Values("Impersonate-Group"))
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
	t.Cleanup(apiserver.Close)
	kubeconfig := filepath.Join(c.dir, "kubeconfig")
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
		t.Fatal(err)
	}
	bin := filepath.Join(c.dir, "real")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv("HOME", c.dir) // kubectl's discovery cache

	if out := c.ok("log", "cm/web", "--as", "admin"); !strings.Contains(out, fmt.Sprint(revs[2])) || !strings.Contains(out, "data.color") {
		t.Fatalf("log:\n%s", out)
	}
	// kubectl takes the global flags as the plugin passes them on.
	if out := c.ok("log", "cm/web", "--as", "admin", "-s", apiserver.URL, "--token", "t0k3n", "--as-uid", "uid-admin",
		"--cache-dir", filepath.Join(c.dir, "cache"), "--disable-compression", "--tls-server-name", "localhost"); !strings.Contains(out, "data.color") {
		t.Fatalf("log with more of kubectl's flags:\n%s", out)
	}
	out := c.ok("restore", "cm/web", "--rev", fmt.Sprint(revs[0]), "--yes", "--as", "admin", "--request-timeout", "20s")
	if v, _ := c.value(key); string(v) != string(values[0]) || !strings.Contains(out, "restored to revision") {
		t.Fatalf("restore through create --raw -f -: %s", out)
	}
	if timeouts.Load() == 0 {
		t.Error("--request-timeout did not reach kubectl")
	}
	code, _, errOut := c.run("", "get", "cm/web", "--rev", fmt.Sprint(revs[0]), "--as", "bob")
	if code != 1 || !strings.Contains(errOut, "you may not get configmaps in the namespace shop") {
		t.Fatalf("get as bob: exit %d\n%s", code, errOut)
	}
	t.Setenv(envNoAPIService, "1")
	if code, _, errOut := c.run("", "log", "cm/web"); code != 1 || !strings.Contains(errOut, "is not registered") {
		t.Fatalf("without the APIService: exit %d\n%s", code, errOut)
	}
}
