// Command testcheck runs `go test -json` and judges the run: it prints a
// line per package as it finishes (and every minute which packages are
// still running), the output of every failed or skipped test, and at the
// end the test counts per package and per backend subtest (test/framework
// names them sqlite, postgres, pgbouncer, mysql and etcd). It exits non-zero when a test
// fails, a package fails or does not build, or go test itself fails, and,
// under CI=true, when any test was skipped: CI must not pass because a
// part did not run.
//
//	go run ./test/ci/testcheck [-go GO] -- [go test flags and packages]
//
// Everything after -- goes to `go test -json` as is.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json`: a test2json TestEvent, or a build
// event (Action build-output or build-fail, with ImportPath).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	ImportPath  string
}

// backends are the subtest names test/framework gives its backends
// (framework.Backend); a test under one of them counts for that backend.
var backends = []string{"sqlite", "postgres", "pgbouncer", "mysql", "etcd"}

func main() {
	goCmd := flag.String("go", "go", "the go command")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: testcheck [-go GO] -- [go test flags and packages]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	os.Exit(run(*goCmd, flag.Args(), os.Stdout, os.Getenv("CI") == "true"))
}

// run runs go test -json with args and returns the exit status.
func run(goCmd string, args []string, out io.Writer, ci bool) int {
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(out, "testcheck: %v\n", err)
		return 2
	}
	fmt.Fprintf(out, "testcheck: %s\n", strings.Join(cmd.Args, " "))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out, "testcheck: starting %s: %v\n", goCmd, err)
		return 2
	}
	r := newReport(out, ci)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		if err := sc.Err(); err != nil {
			lines <- "testcheck: reading go test's output: " + err.Error()
		}
	}()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				done = true
				break
			}
			r.line(l)
		case <-tick.C:
			r.progress(time.Since(start))
		}
	}
	waitErr := cmd.Wait()
	return r.finish(waitErr, time.Since(start))
}

// result is what happened to one test.
type result struct {
	action  string // pass, fail or skip ("" while running)
	elapsed float64
	output  []string
}

// pkg is one package's tests, in the order they started.
type pkg struct {
	name    string
	tests   map[string]*result
	order   []string
	output  []string // the package's own output (TestMain, panics, timeouts)
	action  string
	elapsed float64
	build   string // why it did not build
}

type report struct {
	out      io.Writer
	ci       bool
	pkgs     map[string]*pkg
	order    []string
	build    map[string][]string // build output by import path
	problems []string            // every reason to fail, one line each
}

// problem records a reason to fail, once.
func (r *report) problem(format string, args ...any) {
	if p := fmt.Sprintf(format, args...); !slices.Contains(r.problems, p) {
		r.problems = append(r.problems, p)
	}
}

func newReport(out io.Writer, ci bool) *report {
	return &report{out: out, ci: ci, pkgs: map[string]*pkg{}, build: map[string][]string{}}
}

func (r *report) pkg(name string) *pkg {
	p := r.pkgs[name]
	if p == nil {
		p = &pkg{name: name, tests: map[string]*result{}}
		r.pkgs[name] = p
		r.order = append(r.order, name)
	}
	return p
}

// line takes one line of go test's output.
func (r *report) line(l string) {
	var e event
	if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &e) != nil {
		// Not an event: the go command's own words (a setup failure).
		fmt.Fprintln(r.out, l)
		return
	}
	switch e.Action {
	case "build-output":
		r.build[e.ImportPath] = append(r.build[e.ImportPath], e.Output)
		return
	case "build-fail":
		fmt.Fprintf(r.out, "BUILD FAILED %s\n%s", e.ImportPath, strings.Join(r.build[e.ImportPath], ""))
		r.problem("build failed: %s", e.ImportPath)
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		r.pkgEvent(p, e)
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &result{}
		p.tests[e.Test] = t
		p.order = append(p.order, e.Test)
	}
	switch e.Action {
	case "output":
		t.output = append(t.output, e.Output)
	case "pass":
		t.action, t.elapsed, t.output = e.Action, e.Elapsed, nil
	case "fail", "skip":
		t.action, t.elapsed = e.Action, e.Elapsed
		r.testEnded(p, e.Test, t)
	}
}

func (r *report) pkgEvent(p *pkg, e event) {
	switch e.Action {
	case "output":
		p.output = append(p.output, e.Output)
	case "pass", "fail", "skip":
		p.action, p.elapsed = e.Action, e.Elapsed
		if e.FailedBuild != "" {
			p.build = e.FailedBuild
		}
		r.pkgEnded(p)
	}
}

// maxLines bounds how much of one test's output is printed: a timeout's
// goroutine dump can run to thousands of lines, and its head says which
// tests were running.
const maxLines = 400

// testEnded prints a failed or skipped test's own output at once.
func (r *report) testEnded(p *pkg, name string, t *result) {
	word := "FAIL"
	switch {
	case t.action == "":
		// The test binary ended while it ran: a timeout or a crash.
		t.action, word = "fail", "FAIL (did not finish)"
	case t.action == "skip":
		word = "SKIP"
		if r.ci {
			word = "SKIP (a failure under CI=true)"
		}
	}
	fmt.Fprintf(r.out, "--- %s: %s %s (%.2fs)\n", word, short(p.name), name, t.elapsed)
	printed := 0
	for _, l := range t.output {
		if s := strings.TrimSpace(l); s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- ") {
			continue
		}
		if printed++; printed > maxLines {
			fmt.Fprintf(r.out, "    ... (output cut at %d lines)\n", maxLines)
			break
		}
		fmt.Fprintf(r.out, "    %s", l)
		if !strings.HasSuffix(l, "\n") {
			fmt.Fprintln(r.out)
		}
	}
	switch {
	case t.action == "fail":
		r.problem("failed: %s %s", short(p.name), name)
	case r.ci:
		r.problem("skipped under CI=true: %s %s", short(p.name), name)
	}
	t.output = nil
}

func (r *report) pkgEnded(p *pkg) {
	for _, name := range p.order {
		if t := p.tests[name]; t.action == "" {
			r.testEnded(p, name, t)
		}
	}
	c := p.count()
	switch {
	case p.action == "skip" && len(p.tests) == 0:
		return // no test files
	case p.action == "fail":
		fmt.Fprintf(r.out, "FAIL %s (%.1fs) %s\n", p.name, p.elapsed, c)
		if p.build != "" {
			r.problem("build failed: %s", p.build)
			return
		}
		// A panic, a timeout or TestMain's own failure is in the
		// package's output, not in any test's.
		var own []string
		for _, l := range p.output[max(0, len(p.output)-60):] {
			if s := strings.TrimSpace(l); s != "FAIL" && !strings.HasPrefix(s, "FAIL\t") && !strings.HasPrefix(s, "exit status ") {
				own = append(own, l)
			}
		}
		for _, l := range own {
			fmt.Fprintf(r.out, "    %s", l)
		}
		if c.top[1] == 0 || len(own) > 0 {
			r.problem("package failed: %s", short(p.name))
		}
	default:
		fmt.Fprintf(r.out, "ok   %s (%.1fs) %s\n", p.name, p.elapsed, c)
	}
	p.output = nil
}

// counts are a package's results: of its top-level tests, and of the
// subtests test/framework runs them as on each backend (TestX/sqlite).
type counts struct {
	top     [3]int // passed, failed, skipped
	backend map[string]*[3]int
}

func (p *pkg) count() counts {
	c := counts{backend: map[string]*[3]int{}}
	for _, name := range p.order {
		i := slices.Index([]string{"pass", "fail", "skip"}, p.tests[name].action)
		if i < 0 {
			continue
		}
		parts := strings.Split(name, "/")
		switch {
		case len(parts) == 1:
			c.top[i]++
		case len(parts) == 2 && slices.Contains(backends, parts[1]):
			if c.backend[parts[1]] == nil {
				c.backend[parts[1]] = &[3]int{}
			}
			c.backend[parts[1]][i]++
		}
	}
	return c
}

func (c counts) String() string {
	s := fmt.Sprintf("%d tests passed, %d failed, %d skipped", c.top[0], c.top[1], c.top[2])
	var per []string
	for _, b := range backends {
		if n := c.backend[b]; n != nil {
			per = append(per, fmt.Sprintf("%s %d/%d/%d", b, n[0], n[1], n[2]))
		}
	}
	if len(per) > 0 {
		s += "; per backend passed/failed/skipped: " + strings.Join(per, ", ")
	}
	return s
}

// progress says which packages are still running.
func (r *report) progress(elapsed time.Duration) {
	var running []string
	for _, name := range r.order {
		p := r.pkgs[name]
		if p.action != "" {
			continue
		}
		ended := 0
		for _, t := range p.tests {
			if t.action != "" {
				ended++
			}
		}
		running = append(running, fmt.Sprintf("%s (%d tests done)", short(name), ended))
	}
	if len(running) > 0 {
		fmt.Fprintf(r.out, "... %v: running %s\n", elapsed.Round(time.Second), strings.Join(running, ", "))
	}
}

// finish prints the summary and returns the exit status.
func (r *report) finish(waitErr error, elapsed time.Duration) int {
	fmt.Fprintf(r.out, "\n==== testcheck summary (%v)\n", elapsed.Round(time.Second))
	for _, name := range r.order {
		p := r.pkgs[name]
		if len(p.tests) == 0 && p.action != "fail" {
			continue
		}
		if p.action == "" {
			r.problem("package did not finish: %s", short(name))
		}
		fmt.Fprintf(r.out, "%-5s %s: %s\n", strings.ToUpper(or(p.action, "?")), short(name), p.count())
	}
	if waitErr != nil && len(r.problems) == 0 {
		r.problem("go test failed: %v", waitErr)
	}
	if len(r.problems) == 0 {
		fmt.Fprintln(r.out, "PASS")
		return 0
	}
	fmt.Fprintf(r.out, "FAIL: %d problem(s)\n", len(r.problems))
	for _, p := range r.problems {
		fmt.Fprintf(r.out, "    %s\n", p)
	}
	return 1
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// short drops the module path from a package name.
func short(name string) string {
	return strings.TrimPrefix(name, "github.com/quantyroot/quantykube/")
}
