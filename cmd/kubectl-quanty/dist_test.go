package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// fakeGo is a go command for scripts/dist.sh that builds nothing: the
// "binary" it writes is its directory and its command line.
const fakeGo = `#!/bin/sh
args="$PWD: $*"
while [ $# -gt 0 ]; do
	[ "$1" = -o ] && out=$2
	shift
done
printf '%s\n' "$args" >"$out"
`

// make dist, run on a copy of its inputs in a repository of its own with
// a go that records what it is asked to build: both binaries get the
// version, which is semantic without a tag too, kubectl-quanty built in
// its own module; every archive carries LICENSE, kubectl-quanty's
// kubectl_complete-quanty but on Windows; a release without LICENSE is
// refused, naming it.
func TestDistScript(t *testing.T) {
	for _, tool := range []string{"bash", "git", "tar", "gzip", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("make dist needs %s: %v", tool, err)
		}
	}
	repo, bin := t.TempDir(), t.TempDir()
	for _, f := range []string{"scripts/dist.sh", "plugins/quanty.yaml", "cmd/kubectl-quanty/kubectl_complete-quanty"} {
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(repo, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// kubectl-quanty is built in its module's directory.
	if err := os.MkdirAll(filepath.Join(repo, "cmd", "kubectl-quanty"), 0o755); err != nil {
		t.Fatal(err)
	}
	goCmd := filepath.Join(bin, "go")
	if err := os.WriteFile(goCmd, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, name string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	git := func(args ...string) string {
		t.Helper()
		out, err := run(nil, "git", args...)
		if err != nil {
			t.Fatalf("git %s: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(out)
	}
	dist := func(env ...string) (string, error) {
		return run(append([]string{"GO=" + goCmd, "PLATFORMS=linux/amd64 windows/arm64"}, env...), "bash", "scripts/dist.sh")
	}
	// archive is what the archive of cmd for platform holds: its files,
	// and what the binary was built with.
	archive := func(cmd, v, platform string) ([]string, string) {
		t.Helper()
		tgz := filepath.Join("dist", cmd+"_"+v+"_"+platform+".tar.gz")
		out, err := run(nil, "tar", "-tzf", tgz)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tgz, err, out)
		}
		files := strings.Fields(out)
		exe := cmd
		if strings.HasPrefix(platform, "windows") {
			exe += ".exe"
		}
		built, err := run(nil, "tar", "-xzOf", tgz, exe)
		if err != nil {
			t.Fatalf("%s: %v\n%s", tgz, err, built)
		}
		return files, built
	}
	check := func(v string, files []string) {
		t.Helper()
		for _, cmd := range []string{"kubectl-quanty", "quantykube"} {
			for _, p := range []string{"linux_amd64", "windows_arm64"} {
				got, built := archive(cmd, v, p)
				want := append([]string{cmd}, files...)
				if p == "windows_arm64" {
					want[0] += ".exe"
				} else if cmd == "kubectl-quanty" {
					want = append(want, "kubectl_complete-quanty")
				}
				slices.Sort(want)
				if slices.Sort(got); !slices.Equal(got, want) {
					t.Errorf("%s for %s holds %q, want %q", cmd, p, got, want)
				}
				where, pkg := repo+": ", "./cmd/"+cmd
				if cmd == "kubectl-quanty" {
					where, pkg = filepath.Join(repo, "cmd", cmd)+": ", "."
				}
				if !strings.Contains(built, "-X main.version="+v+" ") || !strings.HasPrefix(built, where) || !strings.HasSuffix(strings.TrimSpace(built), " "+pkg) {
					t.Errorf("%s for %s built as: %s; want -X main.version=%s, %s in %s", cmd, p, built, v, pkg, where)
				}
			}
		}
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "without a license")

	// A development build: named after the commit, said to lack LICENSE.
	out, err := dist()
	if err != nil || !strings.Contains(out, "dist: warning: no LICENSE file at the repository root") {
		t.Fatalf("make dist without LICENSE: %v\n%s", err, out)
	}
	dev := "v0.0.0-g" + git("rev-parse", "--short", "HEAD")
	if _, err := utilversion.ParseSemantic(dev); err != nil {
		t.Errorf("the development version %s is not semantic: %v", dev, err)
	}
	check(dev, nil)

	// A release needs LICENSE.
	if out, err := dist("VERSION=v1.2.3"); err == nil || !strings.Contains(out, "no LICENSE file at the repository root: a release (v1.2.3) needs one in every archive") {
		t.Fatalf("make dist VERSION=v1.2.3 without LICENSE: %v\n%s", err, out)
	}

	if err := os.WriteFile(filepath.Join(repo, "LICENSE"), []byte("the license\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "LICENSE")
	git("commit", "-q", "-m", "a license")
	git("tag", "v1.2.3")
	if out, err := dist(); err != nil || strings.Contains(out, "LICENSE") {
		t.Fatalf("make dist of the tag v1.2.3 with LICENSE: %v\n%s", err, out)
	}
	check("v1.2.3", []string{"LICENSE"})
}
