package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/quantyroot/quantykube/test/framework"
)

// HelmVersion is the helm scripts/helm.sh builds from the Go module proxy.
const HelmVersion = "v4.3.2"

// ChartPath is the chart, from the module root.
const ChartPath = "deploy/chart/quantykube"

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// Helm is the helm binary, built once per machine by scripts/helm.sh
// (cached under .cache/helm), once per test binary looked up. A missing
// helm fails the caller: the chart's checks are part of the suite.
func Helm() (string, error) {
	helmOnce.Do(func() {
		root, err := framework.ModuleRoot()
		if err != nil {
			helmErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "helm.sh"))
		cmd.Env = append(os.Environ(), "HELM_VERSION="+HelmVersion)
		var stderr framework.LogBuffer
		cmd.Stderr = io.MultiWriter(&stderr, os.Stderr)
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("scripts/helm.sh (after %s): %v\n%s", time.Since(start).Round(time.Second), err, stderr.Tail(4000))
			return
		}
		p := strings.TrimSpace(string(out))
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 || strings.ContainsAny(p, "\n ") {
			helmErr = fmt.Errorf("scripts/helm.sh printed %q, want the path of an executable", out)
			return
		}
		helmBin = p
	})
	return helmBin, helmErr
}

// chartDir is the chart's directory.
func chartDir(t testing.TB) string {
	t.Helper()
	root, err := framework.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, ChartPath)
}

// chartProfiles are the values files of chart-testing's profiles
// (ci/*-values.yaml), by name: "sqlite" for ci/sqlite-values.yaml.
func chartProfiles(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = f
	}
	return out
}

// helmEnv keeps helm's configuration, cache and data in dir, and no
// setting of the caller's (a HELM_* variable, a kubeconfig) reaches it.
func helmEnv(dir, kubeconfig string) []string {
	env := []string{
		"HELM_CACHE_HOME=" + filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"HELM_DATA_HOME=" + filepath.Join(dir, "data"),
		"KUBECONFIG=" + kubeconfig,
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HELM_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	return env
}

// runHelm runs helm with args, bounded, and returns its standard output;
// a failure carries its standard error.
func runHelm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	bin, err := Helm()
	if err != nil {
		t.Fatalf("the chart's checks need helm %s: %v", HelmVersion, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = helmEnv(t.TempDir(), os.DevNull)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// renderChart is `helm template RELEASE CHART -n NAMESPACE ARGS...`: the
// objects the chart makes, as YAML documents, failing t when helm does.
func renderChart(t testing.TB, release, namespace string, args ...string) []byte {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", release, chartDir(t), "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderIncluding renders testdata/chart-include, a chart that puts
// QuantyKube in its own pod through this chart's named templates, with
// this chart as its subchart (a copy in charts/). It also lints it.
func renderIncluding(t testing.TB, release, namespace string) []byte {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "chart-include")
	if err := os.CopyFS(dir, os.DirFS("testdata/chart-include")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "charts", "quantykube"), os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	if out, err := runHelm(t, "lint", "--strict", "--namespace", namespace, dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := runHelm(t, "template", release, dir, "--namespace", namespace)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// parseObjects decodes a stream of YAML documents into objects, skipping
// empty ones.
func parseObjects(b []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// objectKey names an object: Kind namespace/name.
func objectKey(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// kinds is how many objects of each kind, sorted, for messages.
func kinds(objs []*unstructured.Unstructured) string {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GetKind()]++
	}
	var out []string
	for k, c := range n {
		out = append(out, fmt.Sprintf("%s=%d", k, c))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
