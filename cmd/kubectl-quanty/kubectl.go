package main

// Every request goes through kubectl, so the plugin needs nothing but what
// kubectl already uses: its kubeconfig, contexts, credentials plugins and
// impersonation.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubectlFlags are kubectl's own flags that the plugin passes on to every
// kubectl it runs.
type kubectlFlags struct {
	kubeconfig, context, cluster, user string
	namespace                          string
	as                                 string
	asGroups                           []string
	requestTimeout                     string
}

func (f *kubectlFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (as kubectl)")
	fs.StringVar(&f.context, "context", "", "the kubeconfig context to use (as kubectl)")
	fs.StringVar(&f.cluster, "cluster", "", "the kubeconfig cluster to use (as kubectl)")
	fs.StringVar(&f.user, "user", "", "the kubeconfig user to use (as kubectl)")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "the namespace (default: the context's, as kubectl)")
	fs.StringVar(&f.as, "as", "", "user to impersonate (as kubectl)")
	fs.StringArrayVar(&f.asGroups, "as-group", nil, "group to impersonate, repeatable (as kubectl)")
	fs.StringVar(&f.requestTimeout, "request-timeout", "", "how long kubectl waits for one answer, e.g. 30s (as kubectl)")
}

// args are the flags as kubectl takes them, only those given.
func (f *kubectlFlags) args() []string {
	var a []string
	add := func(name, v string) {
		if v != "" {
			a = append(a, "--"+name+"="+v)
		}
	}
	add("kubeconfig", f.kubeconfig)
	add("context", f.context)
	add("cluster", f.cluster)
	add("user", f.user)
	add("namespace", f.namespace)
	add("as", f.as)
	for _, g := range f.asGroups {
		add("as-group", g)
	}
	add("request-timeout", f.requestTimeout)
	return a
}

// kubectl runs the kubectl on PATH with the pass-through flags.
type kubectl struct {
	path  string
	flags []string
}

func newKubectl(f *kubectlFlags) (*kubectl, error) {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return nil, fmt.Errorf("kubectl-quanty runs kubectl, and there is none on PATH: %w", err)
	}
	return &kubectl{path: path, flags: f.args()}, nil
}

// kubectlError is a kubectl that failed. For an error answered by the
// API server, kubectl prints "Error from server (Reason): message", and
// Reason is apimachinery's StatusReason (Forbidden, NotFound, Expired, ...).
type kubectlError struct {
	args    []string
	stderr  string
	reason  string
	message string
}

func (e *kubectlError) Error() string {
	if e.message != "" {
		return e.message
	}
	return fmt.Sprintf("kubectl %s: %s", strings.Join(e.args, " "), e.stderr)
}

var serverError = regexp.MustCompile(`(?m)^Error from server(?: \(([A-Za-z]+)\))?: (.*)$`)

func newKubectlError(args []string, stderr string, runErr error) *kubectlError {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		stderr = runErr.Error()
	}
	e := &kubectlError{args: args, stderr: stderr}
	if m := serverError.FindStringSubmatch(stderr); m != nil {
		e.reason, e.message = m[1], m[2]
	}
	// An answer whose Content-Type does not say JSON (a proxy between
	// kubectl and the API server dropped it) is printed whole.
	var st metav1.Status
	if strings.HasPrefix(e.message, "{") && json.Unmarshal([]byte(e.message), &st) == nil && st.Kind == "Status" {
		e.reason, e.message = string(st.Reason), st.Message
	}
	return e
}

// run runs kubectl ARGS with the pass-through flags and stdin, and returns
// its standard output.
func (k *kubectl) run(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	full := append(append([]string(nil), args...), k.flags...)
	cmd := exec.CommandContext(ctx, k.path, full...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return nil, fmt.Errorf("running %s: %w", k.path, err)
		}
		return nil, newKubectlError(args, errOut.String(), err)
	}
	return out.Bytes(), nil
}

// getRaw is kubectl get --raw PATH: the answer's bytes, unchanged.
func (k *kubectl) getRaw(ctx context.Context, path string) ([]byte, error) {
	return k.run(ctx, nil, "get", "--raw", path)
}

// createRaw is kubectl create --raw PATH -f -: body as the POST's body
// (kubectl reads "-" as standard input and sends no Content-Type).
func (k *kubectl) createRaw(ctx context.Context, path string, body []byte) ([]byte, error) {
	return k.run(ctx, body, "create", "--raw", path, "-f", "-")
}

// contextNamespace is the namespace kubectl would use without -n: the
// current context's, or "default".
func (k *kubectl) contextNamespace(ctx context.Context) (string, error) {
	out, err := k.run(ctx, nil, "config", "view", "--minify", "--output", "jsonpath={..context.namespace}")
	if err != nil {
		return "", fmt.Errorf("finding the context's namespace: %w", err)
	}
	if ns := strings.TrimSpace(string(out)); ns != "" {
		return ns, nil
	}
	return "default", nil
}
