package main

// A unified diff of two versions of an object's YAML, built in (Windows
// has no diff), or KUBECTL_EXTERNAL_DIFF as kubectl diff runs it.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// edit is one line of an edit script: kept (' '), removed ('-') or added
// ('+'), with its position in a and in b.
type edit struct {
	op   byte
	a, b int
}

// diffLines is a shortest edit script from a to b (Myers' O((N+M)D)
// algorithm).
func diffLines(a, b []string) []edit {
	n, m := len(a), len(b)
	off := n + m + 1
	v := make([]int, 2*off+1)
	var trace [][]int
	for d := 0; d <= n+m; d++ {
		trace = append(trace, slices.Clone(v))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, off, n, m)
			}
		}
	}
	return nil // not reached: d = n+m always ends
}

func backtrack(trace [][]int, off, x, y int) []edit {
	var es []edit
	for d := len(trace) - 1; d >= 0; d-- {
		v := trace[d]
		k := x - y
		prevK := k - 1
		if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
			prevK = k + 1
		}
		prevX := v[off+prevK]
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			es = append(es, edit{' ', x - 1, y - 1})
			x, y = x-1, y-1
		}
		if d > 0 {
			if x == prevX {
				es = append(es, edit{'+', x, y - 1})
			} else {
				es = append(es, edit{'-', x - 1, y})
			}
		}
		x, y = prevX, prevY
	}
	slices.Reverse(es)
	return es
}

// diffContext is the number of unchanged lines around each change.
const diffContext = 3

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// unified is the unified diff of a and b, "" when they are the same.
// With color, removals are red, additions green and hunk headers cyan,
// as git shows them.
func unified(aName, bName, a, b string, color bool) string {
	al, bl := splitLines(a), splitLines(b)
	es := diffLines(al, bl)
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	var out strings.Builder
	for i := 0; i < len(es); {
		if es[i].op == ' ' {
			i++
			continue
		}
		// A hunk: from diffContext lines before this change to diffContext
		// lines after the last change that is close enough to join it.
		start := max(0, i-diffContext)
		end := i
		for j := i; j < len(es); j++ {
			if es[j].op != ' ' {
				end = j
			} else if j-end > 2*diffContext {
				break
			}
		}
		stop := min(len(es), end+diffContext+1)
		if out.Len() == 0 {
			out.WriteString(paint("1", "--- "+aName) + "\n" + paint("1", "+++ "+bName) + "\n")
		}
		var na, nb int
		for _, e := range es[start:stop] {
			if e.op != '+' {
				na++
			}
			if e.op != '-' {
				nb++
			}
		}
		out.WriteString(paint("36", fmt.Sprintf("@@ -%s +%s @@", hunkRange(es[start].a, na), hunkRange(es[start].b, nb))) + "\n")
		for _, e := range es[start:stop] {
			switch e.op {
			case ' ':
				out.WriteString(" " + al[e.a] + "\n")
			case '-':
				out.WriteString(paint("31", "-"+al[e.a]) + "\n")
			case '+':
				out.WriteString(paint("32", "+"+bl[e.b]) + "\n")
			}
		}
		i = stop
	}
	return out.String()
}

// hunkRange is a hunk's start and length as diff -u prints them: the
// line before for an empty range, the length left out when it is 1.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// side is one version of an object for a diff.
type side struct {
	label string // for the header and the external diff's folder
	text  string // the YAML; "" for absent
}

// externalArg is what kubectl diff lets through of KUBECTL_EXTERNAL_DIFF's
// arguments.
var externalArg = regexp.MustCompile(`^[a-zA-Z0-9-=]+$`)

// externalDiff runs KUBECTL_EXTERNAL_DIFF as kubectl diff does: the
// command and its flags (only letters, digits, - and = pass), then two
// folders, each holding the object's file under the same name. differs
// is its exit status 1.
func externalDiff(command, file string, a, b side, stdout, stderr io.Writer) (differs bool, err error) {
	fields := strings.Split(command, " ")
	var args []string
	for _, f := range fields[1:] {
		if externalArg.MatchString(f) {
			args = append(args, f)
		}
	}
	tmp, err := os.MkdirTemp("", "kubectl-quanty-diff-")
	if err != nil {
		return false, fmt.Errorf("diff: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, s := range []side{a, b} {
		dir := filepath.Join(tmp, s.label)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return false, fmt.Errorf("diff: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(s.text), 0o600); err != nil {
			return false, fmt.Errorf("diff: %w", err)
		}
		args = append(args, dir)
	}
	cmd := exec.Command(fields[0], args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() == 1 {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("KUBECTL_EXTERNAL_DIFF %q: %w", command, err)
	}
	return false, nil
}
