package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"
	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// completions runs the real kubectl's __complete with args, as a shell's
// completion script does at a TAB: the completions, and cobra's directive
// (its last line).
func completions(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	out, err := exec.Command("kubectl", append([]string{"__complete"}, args...)...).Output()
	if err != nil {
		t.Fatalf("kubectl __complete %q: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var names []string
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t") // a description follows a tab
		names = append(names, name)
	}
	return names, lines[len(lines)-1]
}

// kubectl quanty <TAB>, through kubectl's plugin completion: the real
// kubectl finds kubectl_complete-quanty on PATH beside kubectl-quanty and
// runs it; it completes the commands, flags and their values, types, and
// the names of objects that exist or were deleted, as the command line
// names the cluster. Without the script, kubectl completes nothing of the
// plugin's.
func TestCompletionThroughKubectl(t *testing.T) {
	c := cmdtesting.New(t)
	c.KubeAPIServer()
	c.Put("/registry/namespaces/shop", cmdtesting.Encode(t, cmdtesting.Namespace(false)))
	gone := cmdtesting.Namespace(false)
	gone.Name = "old"
	c.Put("/registry/namespaces/old", cmdtesting.Encode(t, gone))
	c.Del("/registry/namespaces/old")
	c.Edits()
	c.Put("/registry/configmaps/shop/gone", cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "gone", "u-gone", nil)))
	c.Del("/registry/configmaps/shop/gone")
	c.Put("/registry/configmaps/team/other", cmdtesting.Encode(t, cmdtesting.ConfigMap("team", "other", "u-other", nil)))

	// krew's layout after an install: the archive's files in the store,
	// only kubectl-quanty linked into bin/ (which is on PATH).
	krew := t.TempDir()
	store := filepath.Join(krew, "store", "quanty", "v1.2.3")
	bin := filepath.Join(krew, "bin")
	for _, d := range []string{store, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, err := os.ReadFile("kubectl_complete-quanty")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, "kubectl_complete-quanty"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(framework.Command(t, "kubectl-quanty"), filepath.Join(bin, "kubectl-quanty")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if got, _ := completions(t, "quanty", ""); slices.Contains(got, "log") {
		t.Fatalf("without kubectl_complete-quanty, kubectl completed the plugin's commands: %q", got)
	}
	// Then the walk-through's own lines put the script on PATH.
	for _, line := range installLines(t) {
		cmd := exec.Command("sh", "-c", line)
		cmd.Env = append(os.Environ(), "KREW_ROOT="+krew)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}

	for _, tc := range []struct {
		args      []string
		want      []string
		directive string
	}{
		{[]string{"quanty", ""}, []string{"blame", "changes", "completion", "deleted", "diff", "get", "help", "log", "restore", "revert", "ui", "undelete", "version"}, ":4"},
		{[]string{"quanty", "re"}, []string{"restore", "revert"}, ":4"},
		{[]string{"quanty", "ui", "--no-"}, []string{"--no-browser"}, ":4"},
		{[]string{"quanty", "get", "cm/web", "--rev", "1", "--show-s"}, []string{"--show-secrets"}, ":4"},
		{[]string{"quanty", "get", "cm/web", "-o", ""}, []string{"yaml", "json", "name", "wide"}, ":4"},
		{[]string{"quanty", "changes", "-o", ""}, []string{"table", "wide", "json", "yaml"}, ":4"},
		// Types from discovery; TYPE/ to go on with a name.
		{[]string{"quanty", "log", "deployments"}, []string{"deployments.apps/"}, ":6"},
		{[]string{"quanty", "deleted", "config"}, []string{"configmaps"}, ":4"},
		{[]string{"quanty", "changes", "cm,deploy"}, []string{"cm,deployments.apps"}, ":4"},
		// Names in the context's namespace, or -n's: those there, then those gone.
		{[]string{"quanty", "restore", "cm/"}, []string{"cm/web", "cm/gone"}, ":4"},
		{[]string{"quanty", "log", "configmaps", ""}, []string{"web", "gone"}, ":4"},
		{[]string{"quanty", "diff", "-n", "team", "configmap/"}, []string{"configmap/other"}, ":4"},
		{[]string{"quanty", "log", "-n", ""}, []string{"shop"}, ":4"},
		{[]string{"quanty", "undelete", ""}, []string{"namespace"}, ":4"},
		{[]string{"quanty", "undelete", "namespace", ""}, []string{"old"}, ":4"},
		// A cluster the line cannot reach completes nothing, and no file.
		{[]string{"quanty", "log", "--server", "http://127.0.0.1:1", "cm/"}, nil, ":4"},
	} {
		got, directive := completions(t, tc.args...)
		if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(tc.want))) || directive != tc.directive {
			t.Errorf("kubectl __complete %q = %q %s, want %q %s", tc.args, got, directive, tc.want, tc.directive)
		}
	}
}

// installLines are the command lines of the walk-through's shell blocks
// (the steps that install, as against its sh blocks, which test/e2e runs
// against a cluster).
func installLines(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "KUBECTL-QUANTY.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for line := range strings.Lines(string(doc)) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "```shell":
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in:
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		t.Fatal("docs/KUBECTL-QUANTY.md shows no install step in a shell block")
	}
	return lines
}

// cobra's completion scripts, for the shells it supports: kubectl-quanty
// completion SHELL.
func TestCompletionScripts(t *testing.T) {
	bin := framework.Command(t, "kubectl-quanty")
	for shell, want := range map[string]string{
		"bash": "__start_kubectl-quanty", "zsh": "#compdef kubectl-quanty", "fish": "complete -c kubectl-quanty",
		"powershell": "Register-ArgumentCompleter -CommandName 'kubectl-quanty'",
	} {
		out, err := exec.Command(bin, "completion", shell).Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("completion %s: %v, no %q in:\n%.400s", shell, err, want, out)
		}
		if shell == "bash" {
			check := exec.Command("bash", "-n")
			check.Stdin = strings.NewReader(string(out))
			if b, err := check.CombinedOutput(); err != nil {
				t.Errorf("the bash completion script does not parse: %v\n%s", err, b)
			}
		}
	}
}
