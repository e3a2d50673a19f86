package main

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The printed objects are what kube-apiserver needs, filled in, and the
// certificate verifies for the name the aggregator dials.
func TestAPIService(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	err := APIServiceCommand{}.Run(t.Context(), []string{"--address", "10.213.0.2", "--port", "9443", "--service", "qk", "--namespace", "storage", "--dir", dir, "--store-user", "qk-store"}, &out, &errs)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, &out)
	for _, k := range []string{"Service/qk", "EndpointSlice/qk", "APIService/v1alpha1.quanty.quantyroot.io",
		"ClusterRole/quanty-history-reader", "ClusterRole/quanty-history-restorer", "ClusterRole/quanty-store-access-reviewer", "ClusterRoleBinding/quanty-store-access-reviewer",
		"ClusterRole/quanty-store-restore-dry-run", "ClusterRoleBinding/quanty-store-restore-dry-run"} {
		if objs[k] == nil {
			t.Fatalf("no %s in:\n%v", k, objs)
		}
	}
	es := objs["EndpointSlice/qk"].Object
	if got := es["metadata"].(map[string]any)["labels"].(map[string]any)["kubernetes.io/service-name"]; got != "qk" {
		t.Errorf("EndpointSlice service label %v", got)
	}
	if addr := es["endpoints"].([]any)[0].(map[string]any)["addresses"].([]any)[0]; addr != "10.213.0.2" || es["addressType"] != "IPv4" {
		t.Errorf("EndpointSlice address %v type %v", addr, es["addressType"])
	}
	if p := es["ports"].([]any)[0].(map[string]any); fmt.Sprint(p["port"]) != "9443" || p["name"] != "https" {
		t.Errorf("EndpointSlice port %v", p)
	}
	svcPort := objs["Service/qk"].Object["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)
	if svcPort["name"] != "https" || fmt.Sprint(svcPort["targetPort"]) != "9443" {
		t.Errorf("Service port %v: its name must be the EndpointSlice port's", svcPort)
	}
	binding := objs["ClusterRoleBinding/quanty-store-access-reviewer"].Object["subjects"].([]any)[0].(map[string]any)
	if binding["kind"] != "User" || binding["name"] != "qk-store" {
		t.Errorf("reviewer binding subject %v", binding)
	}
	// Restores' dry runs impersonate the caller: every part of an identity.
	if s := objs["ClusterRoleBinding/quanty-store-restore-dry-run"].Object["subjects"].([]any)[0].(map[string]any); s["name"] != "qk-store" {
		t.Errorf("dry-run binding subject %v", s)
	}
	var impersonates []string
	for _, r := range objs["ClusterRole/quanty-store-restore-dry-run"].Object["rules"].([]any) {
		for _, res := range r.(map[string]any)["resources"].([]any) {
			impersonates = append(impersonates, res.(string))
		}
	}
	if fmt.Sprint(impersonates) != "[users groups serviceaccounts *]" {
		t.Errorf("the store impersonates %v", impersonates)
	}
	reader := objs["ClusterRole/quanty-history-reader"].Object["rules"].([]any)[0].(map[string]any)
	if v := reader["verbs"].([]any); len(v) != 1 || v[0] != "list" {
		t.Errorf("reader verbs %v: a GET without a name is list", v)
	}

	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	spec := objs["APIService/v1alpha1.quanty.quantyroot.io"].Object["spec"].(map[string]any)
	if bundle, _ := base64.StdEncoding.DecodeString(spec["caBundle"].(string)); !bytes.Equal(bundle, ca) {
		t.Error("caBundle is not the CA in --dir")
	}
	if svc := spec["service"].(map[string]any); svc["name"] != "qk" || svc["namespace"] != "storage" || fmt.Sprint(svc["port"]) != "443" {
		t.Errorf("APIService service %v", svc)
	}
	verifyServing(t, dir, "qk.storage.svc")

	// Again: a new serving certificate, the same CA, so the caBundle stays valid.
	out.Reset()
	if err := (APIServiceCommand{}).Run(t.Context(), []string{"--address", "10.213.0.3", "--dir", dir}, &out, &errs); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if !bytes.Equal(ca, again) {
		t.Error("the CA changed on the second run")
	}
	verifyServing(t, dir, "quantykube.kube-system.svc")
}

// decodeObjects are the YAML documents in r, by kind/name.
func decodeObjects(t *testing.T, r io.Reader) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs[u.GetKind()+"/"+u.GetName()] = u
		}
	}
}

// With --store-service-account both bindings name the service account in
// --namespace; a name YAML would read otherwise is kept as it is.
func TestAPIServiceServiceAccount(t *testing.T) {
	for _, sa := range []string{"quantykube", "odd, {name}: #1"} {
		var out, errs bytes.Buffer
		err := APIServiceCommand{}.Run(t.Context(), []string{"--address", "10.213.0.2", "--namespace", "storage", "--dir", t.TempDir(), "--store-service-account", sa}, &out, &errs)
		if err != nil {
			t.Fatal(err)
		}
		objs := decodeObjects(t, &out)
		for _, b := range []string{"ClusterRoleBinding/quanty-store-access-reviewer", "ClusterRoleBinding/quanty-store-restore-dry-run"} {
			if objs[b] == nil {
				t.Fatalf("no %s", b)
			}
			subjects := objs[b].Object["subjects"].([]any)
			want := map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": "storage"}
			if len(subjects) != 1 || fmt.Sprint(subjects[0]) != fmt.Sprint(want) {
				t.Errorf("%s subjects %v, want [%v]", b, subjects, want)
			}
		}
	}
}

// The templates' placeholders are filled from the values only; a
// placeholder without a value, or an unclosed one, is an error, and a
// value is never read as a placeholder.
func TestFillTemplate(t *testing.T) {
	vals := map[string]string{".A": "{{.B}}", ".B": "b"}
	if got, err := fillTemplate("t", "x {{.A}} {{.B}}{{.B}} y", vals); err != nil || got != "x {{.B}} bb y" {
		t.Errorf("got %q, %v", got, err)
	}
	for text, want := range map[string]string{
		"{{.C}}":        "unknown placeholder {{.C}}",
		"{{- if .A}}":   "unknown placeholder {{- if .A}}",
		"a {{.A}} {{.B": "a {{ without }}",
	} {
		if _, err := fillTemplate("t", text, vals); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

func verifyServing(t *testing.T, dir, name string) {
	t.Helper()
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	crt, _ := os.ReadFile(filepath.Join(dir, "apiserver.crt"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	blk, _ := pem.Decode(crt)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
		t.Errorf("serving certificate for %s: %v", name, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "apiserver.key")); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", st.Mode().Perm())
	}
}

func TestAPIServiceRefuses(t *testing.T) {
	for want, args := range map[string][]string{
		"--address is required":  {},
		"loopback":               {"--address", "127.0.0.1"},
		"not an IP address":      {"--address", "quantykube.local"},
		"--port 0 is not a port": {"--address", "10.0.0.1", "--port", "0"},
		"--days -1":              {"--address", "10.0.0.1", "--days", "-1"},
	} {
		err := APIServiceCommand{}.Run(t.Context(), append(args, "--dir", t.TempDir()), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want %q", args, err, want)
		}
	}
}
