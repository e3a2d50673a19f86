// Package diff is a unified diff of two versions of an object's YAML,
// built in (Windows has no diff program), or KUBECTL_EXTERNAL_DIFF as
// kubectl diff runs it.
package diff

import (
	"fmt"
	"slices"
	"strings"
)

// Edit is one line of an edit script: kept (' '), removed ('-') or added
// ('+'), with its position in a and in b.
type Edit struct {
	Op   byte
	A, B int
}

// maxDiffEdits bounds the edit distance Lines searches for. Myers'
// algorithm keeps the furthest point of every diagonal at every step, so
// its memory grows with the square of the distance; past this bound the
// changed lines are shown all removed, then all added, which is as
// readable when that much changed.
const maxDiffEdits = 2000

// Lines is an edit script from a to b: the shortest one (Myers'
// O((N+M)D) algorithm) when at most maxDiffEdits lines are removed and
// added, else one that keeps the unchanged first and last lines.
func Lines(a, b []string) []Edit { return linesUpTo(a, b, maxDiffEdits) }

func linesUpTo(a, b []string, maxD int) []Edit {
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
	es := make([]Edit, 0, len(a)+len(b)-head-tail)
	for i := range head {
		es = append(es, Edit{' ', i, i})
	}
	mid, ok := myers(ma, mb, maxD)
	if !ok {
		mid = mid[:0]
		for i := range ma {
			mid = append(mid, Edit{'-', i, 0})
		}
		for j := range mb {
			mid = append(mid, Edit{'+', len(ma), j})
		}
	}
	for _, e := range mid {
		es = append(es, Edit{e.Op, e.A + head, e.B + head})
	}
	for i := range tail {
		es = append(es, Edit{' ', len(a) - tail + i, len(b) - tail + i})
	}
	return es
}

// myers is the shortest edit script from a to b, or false when it takes
// more than maxD removed and added lines. Step d keeps only its own
// diagonals k = -d, -d+2, ..., d: fronts[d][(k+d)/2] is the furthest x
// reached on diagonal k with d edits.
func myers(a, b []string, maxD int) ([]Edit, bool) {
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
func backtrack(fronts [][]int32, x, y int) []Edit {
	var es []Edit
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
			es = append(es, Edit{' ', x - 1, y - 1})
			x, y = x-1, y-1
		}
		if down {
			es = append(es, Edit{'+', x, y - 1})
		} else {
			es = append(es, Edit{'-', x - 1, y})
		}
		x, y = px, py
	}
	for x > 0 {
		es = append(es, Edit{' ', x - 1, y - 1})
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

// Unified is the unified diff of a and b, "" when they are the same
// (terminal.WriteDiff paints it).
func Unified(aName, bName, a, b string) string {
	al, bl := splitLines(a), splitLines(b)
	es := Lines(al, bl)
	var out strings.Builder
	for i := 0; i < len(es); {
		if es[i].Op == ' ' {
			i++
			continue
		}
		// A hunk: from diffContext lines before this change to diffContext
		// lines after the last change that is close enough to join it.
		start := max(0, i-diffContext)
		end := i
		for j := i; j < len(es); j++ {
			if es[j].Op != ' ' {
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
			if e.Op != '+' {
				na++
			}
			if e.Op != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(es[start].A, na), hunkRange(es[start].B, nb))
		for _, e := range es[start:stop] {
			switch e.Op {
			case ' ':
				out.WriteString(" " + al[e.A] + "\n")
			case '-':
				out.WriteString("-" + al[e.A] + "\n")
			case '+':
				out.WriteString("+" + bl[e.B] + "\n")
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
