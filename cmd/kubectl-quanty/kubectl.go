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
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// kubectlFlags are kubectl's global flags (kubectl options), parsed by
// k8s.io/cli-runtime's ConfigFlags as kubectl parses them, with the
// deprecated --username and --password that kubectl still takes: the
// plugin takes every flag kubectl takes for reaching a cluster, and
// passes on to each kubectl it runs exactly those the user gave, so
// that kubectl alone decides what a missing one means (the kubeconfig's
// value, its own default).
type kubectlFlags struct {
	config *genericclioptions.ConfigFlags
	fs     *pflag.FlagSet // ConfigFlags' flags and no other
}

func newKubectlFlags() *kubectlFlags {
	f := &kubectlFlags{
		config: genericclioptions.NewConfigFlags(false).WithDeprecatedPasswordFlag(),
		fs:     pflag.NewFlagSet("kubectl", pflag.ContinueOnError),
	}
	f.config.AddFlags(f.fs)
	return f
}

// register adds the flags to a command's flags: the same *pflag.Flag
// values, so that parsing the command line marks which were given.
func (f *kubectlFlags) register(fs *pflag.FlagSet) { fs.AddFlagSet(f.fs) }

// namespace is -n as given, "" without it.
func (f *kubectlFlags) namespace() string { return *f.config.Namespace }

// args are the flags the user gave, as --NAME=VALUE: a default (such as
// --cache-dir's, from $HOME) is never passed on, and a repeated flag
// (--as-group) is passed on once per value.
func (f *kubectlFlags) args() []string {
	var a []string
	f.fs.VisitAll(func(fl *pflag.Flag) {
		if !fl.Changed {
			return
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				a = append(a, "--"+fl.Name+"="+v)
			}
			return
		}
		a = append(a, "--"+fl.Name+"="+fl.Value.String())
	})
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

var (
	serverError = regexp.MustCompile(`(?m)^Error from server(?: \(([A-Za-z]+)\))?: (.*)$`)
	invalid     = regexp.MustCompile(`^The \S+ "[^"]*" is invalid: `)
)

func newKubectlError(args []string, stderr string, runErr error) *kubectlError {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		stderr = runErr.Error()
	}
	e := &kubectlError{args: args, stderr: stderr}
	if m := serverError.FindStringSubmatch(stderr); m != nil {
		e.reason, e.message = m[1], m[2]
	} else if invalid.MatchString(stderr) {
		// kubectl prints a 422 (Invalid) as its message alone.
		e.reason, e.message = "Invalid", stderr
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
