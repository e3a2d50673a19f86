package cmd_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// The plugin with the real kubectl: a fake kube-apiserver serves the
// discovery documents and forwards the aggregated API's paths, as the
// aggregator does, with the impersonated user as the caller. This proves
// what the fake kubectl assumes of the real one: get --raw copies the
// answer, create --raw -f - sends standard input, errors are printed as
// "Error from server (Reason): message", the flags are kubectl's.
//
// The kubectl is $KUBECTL (CI sets it to kubectl v1.37.2, built from the
// module proxy), else the first on PATH (cmdtesting.KubeAPIServer).
func TestRealKubectl(t *testing.T) {
	c := newCluster(t)
	key, revs, values := c.Edits()
	url, timeouts := c.KubeAPIServer()

	if out := c.OK("log", "cm/web", "--as", "admin"); !strings.Contains(out, fmt.Sprint(revs[2])) || !strings.Contains(out, "data.color") {
		t.Fatalf("log:\n%s", out)
	}
	// kubectl takes the global flags as the plugin passes them on.
	if out := c.OK("log", "cm/web", "--as", "admin", "-s", url, "--token", "t0k3n", "--as-uid", "uid-admin",
		"--cache-dir", filepath.Join(c.Dir, "cache"), "--disable-compression", "--tls-server-name", "localhost"); !strings.Contains(out, "data.color") {
		t.Fatalf("log with more of kubectl's flags:\n%s", out)
	}
	out := c.OK("restore", "cm/web", "--rev", fmt.Sprint(revs[0]), "--yes", "--as", "admin", "--request-timeout", "20s")
	if v, _ := c.Value(key); string(v) != string(values[0]) || !strings.Contains(out, "restored to revision") {
		t.Fatalf("restore through create --raw -f -: %s", out)
	}
	if timeouts.Load() == 0 {
		t.Error("--request-timeout did not reach kubectl")
	}
	code, _, errOut := c.Run("", "get", "cm/web", "--rev", fmt.Sprint(revs[0]), "--as", "bob")
	if code != 1 || !strings.Contains(errOut, "you may not get configmaps in the namespace shop") {
		t.Fatalf("get as bob: exit %d\n%s", code, errOut)
	}
	c.NoAPIService = true
	if code, _, errOut := c.Run("", "log", "cm/web"); code != 1 || !strings.Contains(errOut, "is not registered") {
		t.Fatalf("without the APIService: exit %d\n%s", code, errOut)
	}
}
