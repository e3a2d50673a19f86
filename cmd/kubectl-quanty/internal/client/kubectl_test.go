package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// kubectl's answers, as it prints them on stderr: the server's, with its
// reason, or its own.
func TestParseError(t *testing.T) {
	for stderr, want := range map[string]StatusError{
		`Error from server (Forbidden): logs.quanty.quantyroot.io is forbidden: User "bob" cannot list resource "logs"`: {"Forbidden", `logs.quanty.quantyroot.io is forbidden: User "bob" cannot list resource "logs"`},
		`Error from server (NotFound): the server could not find the requested resource`:                                {"NotFound", "the server could not find the requested resource"},
		"I0501 12:00:00 warning\nError from server (Expired): quantykube: revision 3 is older than the oldest":          {"Expired", "quantykube: revision 3 is older than the oldest"},
		`Error from server: an error on the server ("x") has prevented the request from succeeding`:                     {"", `an error on the server ("x") has prevented the request from succeeding`},
		// A proxy that dropped the answer's Content-Type: the Status whole.
		`Error from server (Forbidden): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"web\" is forbidden","reason":"Forbidden","code":403}`: {"Forbidden", `configmaps "web" is forbidden`},
		// A 422, which kubectl prints as its message alone.
		"The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set": {"Invalid", "The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"},
	} {
		err := ParseError([]string{"get", "--raw", "/x"}, stderr, errors.New("exit status 1"))
		var se *StatusError
		if !errors.As(err, &se) || *se != want {
			t.Errorf("ParseError(%q) = %#v, want %#v", stderr, err, want)
		}
	}
	// kubectl's own failure, after its command line (which holds no flag
	// passed on, so no token).
	err := ParseError([]string{"get", "--raw", "/x"}, "The connection to the server localhost:8080 was refused - did you specify the right host or port?\n", errors.New("exit status 1"))
	var se *StatusError
	if errors.As(err, &se) || err.Error() != "kubectl get --raw /x: The connection to the server localhost:8080 was refused - did you specify the right host or port?" {
		t.Errorf("ParseError of kubectl's own failure = %#v", err)
	}
	if err := ParseError([]string{"get"}, "", errors.New("signal: killed")); err.Error() != "kubectl get: signal: killed" {
		t.Errorf("ParseError without stderr = %v", err)
	}
}

// Only the flags given are passed on, as given, once per value.
func TestPassedOn(t *testing.T) {
	fs := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(false).WithDeprecatedPasswordFlag().AddFlags(fs)
	if got := PassedOn(fs); len(got) != 0 {
		t.Fatalf("no flag given: %q passed on", got)
	}
	if err := fs.Parse([]string{"-n", "shop", "--as-group=a", "--as-group", "b", "--insecure-skip-tls-verify", "--request-timeout", "7s"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"--as-group=a", "--as-group=b", "--insecure-skip-tls-verify=true", "--namespace=shop", "--request-timeout=7s"}
	if got := PassedOn(fs); !slices.Equal(got, want) {
		t.Fatalf("PassedOn = %q, want %q", got, want)
	}
}

// fakeKubectl records its command line and standard input, and answers
// as a script says.
const fakeKubectl = `#!/bin/sh
printf '%s\n' "$*" >>"$FAKE_DIR/args"
cat >"$FAKE_DIR/stdin"
case "$*" in
"get --raw /fail "*) echo 'Error from server (Forbidden): no' >&2; exit 1 ;;
"config view "*) printf '%s' "$FAKE_NS" ;;
*) printf 'answer' ;;
esac
`

// The kubectl client runs kubectl get --raw, create --raw -f - with the
// body on standard input, and config view, each with the flags after the
// command's own.
func TestKubectl(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubectl")
	if err := os.WriteFile(path, []byte(fakeKubectl), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_DIR", dir)
	k := &Kubectl{Path: path, Flags: []string{"--context=c1", "--as=bob"}}
	ctx := t.Context()
	if out, err := k.Get(ctx, "/apis/x?q=1"); err != nil || string(out) != "answer" {
		t.Fatalf("Get = %q, %v", out, err)
	}
	if out, err := k.Post(ctx, "/apis/x/restores", []byte("body\x00")); err != nil || string(out) != "answer" {
		t.Fatalf("Post = %q, %v", out, err)
	}
	if stdin, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(stdin) != "body\x00" {
		t.Errorf("Post sent %q on standard input", stdin)
	}
	_, err := k.Get(ctx, "/fail")
	var se *StatusError
	if !errors.As(err, &se) || se.Reason != "Forbidden" {
		t.Errorf("a refusal: %v", err)
	}
	for ns, want := range map[string]string{"": "default", "team": "team"} {
		t.Setenv("FAKE_NS", ns)
		if got, err := k.ContextNamespace(ctx); err != nil || got != want {
			t.Errorf("ContextNamespace with %q = %q, %v", ns, got, err)
		}
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	want := fmt.Sprintf("get --raw /apis/x?q=1 %[1]s\ncreate --raw /apis/x/restores -f - %[1]s\nget --raw /fail %[1]s\n"+
		"config view --minify --output jsonpath={..context.namespace} %[1]s\nconfig view --minify --output jsonpath={..context.namespace} %[1]s\n", "--context=c1 --as=bob")
	if string(args) != want {
		t.Errorf("kubectl ran:\n%s\nwant:\n%s", args, want)
	}
	t.Setenv("PATH", dir)
	fs := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	fs.String("context", "", "")
	if err := fs.Parse([]string{"--context", "c2"}); err != nil {
		t.Fatal(err)
	}
	if k, err := NewKubectl(fs); err != nil || k.Path != path || strings.Join(k.Flags, " ") != "--context=c2" {
		t.Errorf("NewKubectl = %+v, %v", k, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := NewKubectl(fs); err == nil || !strings.Contains(err.Error(), "there is none on PATH") {
		t.Errorf("NewKubectl without kubectl: %v", err)
	}
}
