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

// maxDiffEdits bounds the edit distance diffLines searches for. Myers'
// algorithm keeps the furthest point of every diagonal at every step, so
// its memory grows with the square of the distance; past this bound the
// changed lines are shown all removed, then all added, which is as
// readable when that much changed.
const maxDiffEdits = 2000

// diffLines is an edit script from a to b: the shortest one (Myers'
// O((N+M)D) algorithm) when at most maxDiffEdits lines are removed and
// added, else one that keeps the unchanged first and last lines.
func diffLines(a, b []string) []edit { return diffLinesUpTo(a, b, maxDiffEdits) }

func diffLinesUpTo(a, b []string, maxD int) []edit {
	// The common head and tail are kept as they are: the search then
	// spends nothing on the lines around a change, which in an object's
	// YAML are most of them.
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	ma, mb := a[head:len(a)-tail], b[head:len(b)-tail]
	es := make([]edit, 0, len(a)+len(b)-head-tail)
	for i := range head {
		es = append(es, edit{' ', i, i})
	}
	mid, ok := myers(ma, mb, maxD)
	if !ok {
		mid = mid[:0]
		for i := range ma {
			mid = append(mid, edit{'-', i, 0})
		}
		for j := range mb {
			mid = append(mid, edit{'+', len(ma), j})
		}
	}
	for _, e := range mid {
		es = append(es, edit{e.op, e.a + head, e.b + head})
	}
	for i := range tail {
		es = append(es, edit{' ', len(a) - tail + i, len(b) - tail + i})
	}
	return es
}

// myers is the shortest edit script from a to b, or false when it takes
// more than maxD removed and added lines. Step d keeps only its own
// diagonals k = -d, -d+2, ..., d: fronts[d][(k+d)/2] is the furthest x
// reached on diagonal k with d edits.
func myers(a, b []string, maxD int) ([]edit, bool) {
	n, m := len(a), len(b)
	var fronts [][]int32
	for d := 0; d <= min(n+m, maxD); d++ {
		front := make([]int32, d+1)
		for i := range front {
			k := 2*i - d
			var x int
			switch {
			case d == 0:
			case i == 0 || i < d && fronts[d-1][i-1] < fronts[d-1][i]:
				x = int(fronts[d-1][i]) // down from diagonal k+1: an added line
			default:
				x = int(fronts[d-1][i-1]) + 1 // right from diagonal k-1: a removed line
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			front[i] = int32(x)
			if x >= n && y >= m {
				return backtrack(append(fronts, front), n, m), true
			}
		}
		fronts = append(fronts, front)
	}
	return nil, false
}

// backtrack walks the fronts back from (x, y), the end of both texts, to
// the start.
func backtrack(fronts [][]int32, x, y int) []edit {
	var es []edit
	for d := len(fronts) - 1; d > 0; d-- {
		i := (x - y + d) / 2
		prev := fronts[d-1]
		// The step came down from diagonal k+1 (prev[i]) or right from
		// k-1 (prev[i-1]), as myers chose it.
		down := i == 0 || i < d && prev[i-1] < prev[i]
		var px, py int
		if down {
			px = int(prev[i])
			py = px - (x - y + 1)
		} else {
			px = int(prev[i-1])
			py = px - (x - y - 1)
		}
		// The snake after the step, then the step itself.
		sx := px
		if !down {
			sx++
		}
		for x > sx {
			es = append(es, edit{' ', x - 1, y - 1})
			x, y = x-1, y-1
		}
		if down {
			es = append(es, edit{'+', x, y - 1})
		} else {
			es = append(es, edit{'-', x - 1, y})
		}
		x, y = px, py
	}
	for x > 0 {
		es = append(es, edit{' ', x - 1, y - 1})
		x, y = x-1, y-1
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

// unified is the unified diff of a and b, "" when they are the same
// (writeDiff paints it).
func unified(aName, bName, a, b string) string {
	al, bl := splitLines(a), splitLines(b)
	es := diffLines(al, bl)
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
			out.WriteString("--- " + aName + "\n+++ " + bName + "\n")
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
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(es[start].a, na), hunkRange(es[start].b, nb))
		for _, e := range es[start:stop] {
			switch e.op {
			case ' ':
				out.WriteString(" " + al[e.a] + "\n")
			case '-':
				out.WriteString("-" + al[e.a] + "\n")
			case '+':
				out.WriteString("+" + bl[e.b] + "\n")
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
