package main

// `quantykube version`: the build's version and commit, from what the Go
// toolchain records in the binary (runtime/debug.ReadBuildInfo).

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/quantyroot/quantykube/pkg/server"
)

// VersionCommand is `quantykube version` (and `quantykube --version`).
type VersionCommand struct{}

// Usage is version's help.
func (VersionCommand) Usage() string {
	return `quantykube version

Prints the build's version (a release's, as make dist names it), the
commit it was built from (with "(modified)" when the tree had changes), the
commit's time, the Go version and the etcd API version served. A binary built without VCS information (go build
-buildvcs=false, or outside a checkout) says "unknown".`
}

// version names a release, set by make dist (-ldflags -X
// main.version=...) as in kubectl-quanty: the toolchain records a
// pseudo-version there, not the release's name.
var version string

// buildInfo is what version prints.
type buildInfo struct {
	Version, Commit, Time, Go string
	Modified                  bool
}

// readBuildInfo reads the toolchain's record; ok false (no record) gives
// "unknown" everywhere, never an error.
func readBuildInfo(bi *debug.BuildInfo, ok bool) buildInfo {
	b := buildInfo{Version: "unknown", Commit: "unknown", Time: "unknown", Go: "unknown"}
	if !ok || bi == nil {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		b.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

func (b buildInfo) write(w io.Writer) {
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "quantykube %s\ncommit:   %s\nbuilt:    %s\ngo:       %s\netcd API: %s\n", b.Version, commit, b.Time, b.Go, server.Version)
}

// currentBuild is this binary's build information, with the release's
// version when make dist set one.
func currentBuild() buildInfo {
	b := readBuildInfo(debug.ReadBuildInfo())
	if version != "" {
		b.Version = version
	}
	return b
}

// Run prints the build information.
func (c VersionCommand) Run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version takes no arguments, got %q", fs.Args())
	}
	currentBuild().write(stdout)
	return nil
}
