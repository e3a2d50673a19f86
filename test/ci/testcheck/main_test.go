package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// feed runs a report over go test -json lines and returns its exit status,
// its problems and what it printed.
func feed(t *testing.T, ci bool, waitErr error, lines ...string) (int, []string, string) {
	t.Helper()
	var out strings.Builder
	r := newReport(&out, ci)
	for _, l := range lines {
		r.line(l)
	}
	code := r.finish(waitErr, 0)
	return code, r.problems, out.String()
}

const (
	pkgStart = `{"Action":"start","Package":"m/p"}`
	pkgPass  = `{"Action":"pass","Package":"m/p","Elapsed":1}`
	pkgFail  = `{"Action":"fail","Package":"m/p","Elapsed":1}`
)

func TestPassingRun(t *testing.T) {
	code, problems, out := feed(t, true, nil,
		pkgStart,
		`{"Action":"run","Package":"m/p","Test":"TestA"}`,
		`{"Action":"run","Package":"m/p","Test":"TestA/sqlite"}`,
		`{"Action":"output","Package":"m/p","Test":"TestA/sqlite","Output":"noise of a passing test\n"}`,
		`{"Action":"pass","Package":"m/p","Test":"TestA/sqlite"}`,
		`{"Action":"run","Package":"m/p","Test":"TestA/etcd"}`,
		`{"Action":"pass","Package":"m/p","Test":"TestA/etcd"}`,
		`{"Action":"pass","Package":"m/p","Test":"TestA"}`,
		pkgPass,
		`{"Action":"skip","Package":"m/empty"}`,
	)
	if code != 0 || len(problems) != 0 {
		t.Fatalf("exit %d, problems %q", code, problems)
	}
	if !strings.Contains(out, "1 tests passed, 0 failed, 0 skipped; per backend passed/failed/skipped: sqlite 1/0/0, etcd 1/0/0") {
		t.Fatalf("counts missing:\n%s", out)
	}
	if strings.Contains(out, "noise of a passing test") || strings.Contains(out, "m/empty") {
		t.Fatalf("printed a passing test's output or a package without tests:\n%s", out)
	}
}

func TestSkipFailsOnlyUnderCI(t *testing.T) {
	lines := []string{
		pkgStart,
		`{"Action":"run","Package":"m/p","Test":"TestA"}`,
		`{"Action":"run","Package":"m/p","Test":"TestA/postgres"}`,
		`{"Action":"output","Package":"m/p","Test":"TestA/postgres","Output":"    x_test.go:1: POSTGRESQL TESTS NOT RUN\n"}`,
		`{"Action":"skip","Package":"m/p","Test":"TestA/postgres"}`,
		`{"Action":"pass","Package":"m/p","Test":"TestA"}`,
		pkgPass,
	}
	code, problems, out := feed(t, false, nil, lines...)
	if code != 0 || len(problems) != 0 || !strings.Contains(out, "POSTGRESQL TESTS NOT RUN") {
		t.Fatalf("without CI: exit %d, problems %q, output:\n%s", code, problems, out)
	}
	code, problems, _ = feed(t, true, nil, lines...)
	if code != 1 || !slices.Equal(problems, []string{"skipped under CI=true: m/p TestA/postgres"}) {
		t.Fatalf("under CI: exit %d, problems %q", code, problems)
	}
}

func TestFailures(t *testing.T) {
	code, problems, out := feed(t, false, errors.New("exit status 1"),
		pkgStart,
		`{"Action":"run","Package":"m/p","Test":"TestA"}`,
		`{"Action":"output","Package":"m/p","Test":"TestA","Output":"    x_test.go:9: want 2, got 3\n"}`,
		`{"Action":"fail","Package":"m/p","Test":"TestA","Elapsed":0.5}`,
		`{"Action":"run","Package":"m/p","Test":"TestHang"}`,
		`{"Action":"output","Package":"m/p","Test":"TestHang","Output":"panic: test timed out after 1s\n"}`,
		pkgFail,
		`{"ImportPath":"m/q [m/q.test]","Action":"build-output","Output":"q.go:1: undefined: x\n"}`,
		`{"ImportPath":"m/q [m/q.test]","Action":"build-fail"}`,
		`{"Action":"start","Package":"m/q"}`,
		`{"Action":"fail","Package":"m/q","Elapsed":0,"FailedBuild":"m/q [m/q.test]"}`,
		`{"Action":"start","Package":"m/r"}`,
		`{"Action":"output","Package":"m/r","Output":"TestMain: cannot start\n"}`,
		`{"Action":"fail","Package":"m/r","Elapsed":0}`,
		`{"Action":"start","Package":"m/s"}`,
		`{"Action":"run","Package":"m/s","Test":"TestLong"}`,
	)
	want := []string{
		"failed: m/p TestA",
		"failed: m/p TestHang",
		"build failed: m/q [m/q.test]",
		"package failed: m/r",
		"package did not finish: m/s",
	}
	if code != 1 || !slices.Equal(problems, want) {
		t.Fatalf("exit %d, problems\n%q\nwant\n%q", code, problems, want)
	}
	for _, s := range []string{"want 2, got 3", "panic: test timed out", "undefined: x", "TestMain: cannot start"} {
		if !strings.Contains(out, s) {
			t.Fatalf("output lacks %q:\n%s", s, out)
		}
	}
}

// A go test that fails without a failing event (its setup, say) fails the
// run too.
func TestGoTestExitStatus(t *testing.T) {
	if code, problems, _ := feed(t, false, errors.New("exit status 2"), "go: cannot find main module"); code != 1 || len(problems) != 1 {
		t.Fatalf("exit %d, problems %q", code, problems)
	}
	if code := run("false", nil, io.Discard, false); code != 1 {
		t.Fatalf("run of a go command that fails: exit %d", code)
	}
}
