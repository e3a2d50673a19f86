package main

// A fake kubectl for the command-layer tests: this test binary, run under
// the name kubectl from a folder first on PATH. It does what the plugin
// asks of the real one, against a fake cluster: the discovery documents
// of a small API server, and the real aggregated API (pkg/apiagg over a
// real store), reached as kube-apiserver's front proxy reaches it, with
// the caller's name from --as. It records every command line it runs.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// The fake's settings, from the test through the environment.
const (
	envFake         = "KUBECTL_QUANTY_TEST_FAKE"      // set: this binary is kubectl
	envAPI          = "KUBECTL_QUANTY_TEST_API"       // the aggregated API's https URL
	envTLS          = "KUBECTL_QUANTY_TEST_TLS"       // serving CA, front-proxy cert and key, comma-separated
	envDiscovery    = "KUBECTL_QUANTY_TEST_DISCOVERY" // a JSON file: path -> document
	envNamespace    = "KUBECTL_QUANTY_TEST_NAMESPACE" // the context's namespace
	envArgsLog      = "KUBECTL_QUANTY_TEST_ARGS"      // where command lines are recorded
	envNoAPIService = "KUBECTL_QUANTY_TEST_NO_APISERVICE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envFake) != "" {
		os.Exit(fakeKubectl(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// fakeKubectl runs one kubectl command line and returns its exit status.
func fakeKubectl(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if f, err := os.OpenFile(os.Getenv(envArgsLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		fmt.Fprintln(f, strings.Join(args, " "))
		f.Close()
	}
	fs := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	raw := fs.String("raw", "", "")
	file := fs.StringP("filename", "f", "", "")
	output := fs.String("output", "", "")
	fs.Bool("minify", false, "")
	// kubectl's global flags, as kubectl itself registers them.
	global := genericclioptions.NewConfigFlags(false).WithDeprecatedPasswordFlag()
	global.AddFlags(fs)
	as, asGroups := global.Impersonate, global.ImpersonateGroup
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	verb := strings.Join(fs.Args(), " ")
	switch {
	case verb == "config view" && *output == "jsonpath={..context.namespace}":
		fmt.Fprint(stdout, os.Getenv(envNamespace))
		return 0
	case verb == "get" && *raw != "":
		return fakeRequest(http.MethodGet, *raw, nil, *as, *asGroups, stdout, stderr)
	case verb == "create" && *raw != "" && *file == "-":
		body, err := io.ReadAll(stdin)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 1
		}
		return fakeRequest(http.MethodPost, *raw, body, *as, *asGroups, stdout, stderr)
	}
	fmt.Fprintf(stderr, "fake kubectl: unexpected command line %q\n", args)
	return 2
}

// fakeRequest answers a raw request: discovery from the documents, the
// aggregated API through the front proxy; errors as kubectl prints them.
func fakeRequest(method, path string, body []byte, as string, groups []string, stdout, stderr io.Writer) int {
	status, answer, err := fakeAnswer(method, path, body, as, groups)
	if err != nil {
		fmt.Fprintf(stderr, "fake kubectl: %v\n", err)
		return 2
	}
	if status/100 == 2 {
		stdout.Write(answer)
		return 0
	}
	var st metav1.Status
	if json.Unmarshal(answer, &st) != nil || st.Kind != "Status" {
		fmt.Fprintf(stderr, "Error from server: an error on the server (%q) has prevented the request from succeeding\n", answer)
		return 1
	}
	fmt.Fprintf(stderr, "Error from server (%s): %s\n", st.Reason, st.Message)
	return 1
}

func fakeAnswer(method, path string, body []byte, as string, groups []string) (int, []byte, error) {
	if !strings.HasPrefix(path, apiBase+"/") || os.Getenv(envNoAPIService) != "" {
		docs := map[string]json.RawMessage{}
		b, err := os.ReadFile(os.Getenv(envDiscovery))
		if err != nil {
			return 0, nil, err
		}
		if err := json.Unmarshal(b, &docs); err != nil {
			return 0, nil, err
		}
		if d, ok := docs[path]; ok && method == http.MethodGet {
			return http.StatusOK, d, nil
		}
		// kube-apiserver's answer for a path nothing serves.
		return http.StatusNotFound, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`), nil
	}
	files := strings.Split(os.Getenv(envTLS), ",")
	ca, err := os.ReadFile(files[0])
	if err != nil {
		return 0, nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(files[1], files[2])
	if err != nil {
		return 0, nil, err
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}}
	req, err := http.NewRequest(method, os.Getenv(envAPI)+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if as == "" {
		// The cluster's admin, in system:masters as kubeadm's and k3s's
		// admin kubeconfigs are: the raw-access group.
		as = "admin"
		groups = append(groups, "system:masters")
	}
	req.Header.Set("X-Remote-User", as)
	for _, g := range append(groups, "system:authenticated") {
		req.Header.Add("X-Remote-Group", g)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}
