package client

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

// Kubectl is an Interface that runs the kubectl at Path with Flags after
// each command line.
type Kubectl struct {
	Path  string
	Flags []string
}

// NewKubectl is the kubectl on PATH, with the flags of fs that were
// given (PassedOn).
func NewKubectl(fs *pflag.FlagSet) (*Kubectl, error) {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return nil, fmt.Errorf("kubectl-quanty runs kubectl, and there is none on PATH: %w", err)
	}
	return &Kubectl{Path: path, Flags: PassedOn(fs)}, nil
}

// PassedOn are the flags of fs the user gave, as --NAME=VALUE: a default
// (such as --cache-dir's, from $HOME) is never passed on, so that kubectl
// alone decides what a missing one means (the kubeconfig's value, its own
// default), and a repeated flag (--as-group) is passed on once per value
// (ADR-024).
func PassedOn(fs *pflag.FlagSet) []string {
	var a []string
	fs.VisitAll(func(fl *pflag.Flag) {
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

var (
	serverError = regexp.MustCompile(`(?m)^Error from server(?: \(([A-Za-z]+)\))?: (.*)$`)
	invalid     = regexp.MustCompile(`^The \S+ "[^"]*" is invalid: `)
)

// ParseError is the error of a kubectl that exited with stderr: a
// *StatusError when the API server answered (kubectl prints "Error from
// server (Reason): message", and a 422 as its message alone), else what
// kubectl said, after its command line.
func ParseError(args []string, stderr string, runErr error) error {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		stderr = runErr.Error()
	}
	var e *StatusError
	if m := serverError.FindStringSubmatch(stderr); m != nil {
		e = &StatusError{Reason: m[1], Message: m[2]}
	} else if invalid.MatchString(stderr) {
		e = &StatusError{Reason: "Invalid", Message: stderr}
	} else {
		return fmt.Errorf("kubectl %s: %s", strings.Join(args, " "), stderr)
	}
	// An answer whose Content-Type does not say JSON (a proxy between
	// kubectl and the API server dropped it) is printed whole.
	var st metav1.Status
	if strings.HasPrefix(e.Message, "{") && json.Unmarshal([]byte(e.Message), &st) == nil && st.Kind == "Status" {
		e.Reason, e.Message = string(st.Reason), st.Message
	}
	return e
}

// run runs kubectl ARGS with the pass-through flags and stdin, and returns
// its standard output.
func (k *Kubectl) run(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	full := append(append([]string(nil), args...), k.Flags...)
	cmd := exec.CommandContext(ctx, k.Path, full...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return nil, fmt.Errorf("running %s: %w", k.Path, err)
		}
		return nil, ParseError(args, errOut.String(), err)
	}
	return out.Bytes(), nil
}

// Get is kubectl get --raw PATH.
func (k *Kubectl) Get(ctx context.Context, path string) ([]byte, error) {
	return k.run(ctx, nil, "get", "--raw", path)
}

// Post is kubectl create --raw PATH -f -: body as the POST's body (kubectl
// reads "-" as standard input and sends no Content-Type).
func (k *Kubectl) Post(ctx context.Context, path string, body []byte) ([]byte, error) {
	return k.run(ctx, body, "create", "--raw", path, "-f", "-")
}

// ContextNamespace asks kubectl config view for the current context's
// namespace.
func (k *Kubectl) ContextNamespace(ctx context.Context) (string, error) {
	out, err := k.run(ctx, nil, "config", "view", "--minify", "--output", "jsonpath={..context.namespace}")
	if err != nil {
		return "", fmt.Errorf("finding the context's namespace: %w", err)
	}
	if ns := strings.TrimSpace(string(out)); ns != "" {
		return ns, nil
	}
	return "default", nil
}
