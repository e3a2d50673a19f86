package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/server"
	"github.com/quantyroot/quantykube/test/framework"
)

// version reads the toolchain's record, and says "unknown" for whatever it
// lacks (CI builds with -buildvcs=false) instead of failing.
func TestReadBuildInfo(t *testing.T) {
	full := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	cases := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"a release built from a checkout", full, true, "quantykube v0.4.0\ncommit:   0123456789abcdef0123456789abcdef01234567 (modified)\nbuilt:    2026-01-02T03:04:05Z\ngo:       go1.26.0\n"},
		{"-buildvcs=false", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, true, "quantykube (devel)\ncommit:   unknown\nbuilt:    unknown\ngo:       go1.26.0\n"},
		{"no build information", nil, false, "quantykube unknown\ncommit:   unknown\nbuilt:    unknown\ngo:       unknown\n"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		readBuildInfo(c.bi, c.ok).write(&out)
		if want := c.want + "etcd API: " + server.Version + "\n"; out.String() != want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, out.String(), want)
		}
	}
}

// The built binary prints a commit (or "unknown") and exits 0, whatever
// -buildvcs was.
func TestVersionCommand(t *testing.T) {
	out, err := exec.Command(framework.Binary(t), "version").Output()
	if err != nil {
		t.Fatalf("quantykube version: %v", err)
	}
	if !regexp.MustCompile(`(?m)^commit:   ([0-9a-f]{40}( \(modified\))?|unknown)$`).Match(out) || !strings.HasPrefix(string(out), "quantykube ") {
		t.Fatalf("quantykube version:\n%s", out)
	}
}

// make dist names the release (-ldflags -X main.version=...): version
// prints that name, not the pseudo-version the toolchain records.
func TestReleaseVersion(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v1.2.3"
	var out bytes.Buffer
	currentBuild().write(&out)
	if !strings.HasPrefix(out.String(), "quantykube v1.2.3\n") {
		t.Fatalf("quantykube version:\n%s", out.String())
	}
}
