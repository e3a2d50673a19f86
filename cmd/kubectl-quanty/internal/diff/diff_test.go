package diff

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	a := "apiVersion: v1\ndata:\n  color: green\n  size: L\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\n  uid: u1\n"
	b := "apiVersion: v1\ndata:\n  color: red\n  size: L\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\n  uid: u1\n"
	want := "--- a\n+++ b\n@@ -1,6 +1,6 @@\n apiVersion: v1\n data:\n-  color: green\n+  color: red\n   size: L\n kind: ConfigMap\n metadata:\n"
	if got := Unified("a", "b", a, b); got != want {
		t.Fatalf("unified:\n%s\nwant:\n%s", got, want)
	}
	if got := Unified("a", "b", a, a); got != "" {
		t.Fatalf("same texts: %q", got)
	}
	if got := Unified("a", "b", "", "x: 1\ny: 2\n"); got != "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x: 1\n+y: 2\n" {
		t.Fatalf("from nothing: %q", got)
	}
	if got := Unified("a", "b", "x: 1\n", ""); got != "--- a\n+++ b\n@@ -1 +0,0 @@\n-x: 1\n" {
		t.Fatalf("to nothing: %q", got)
	}
	// Changes far apart are two hunks; near ones one.
	long := func(changed ...int) string {
		var s strings.Builder
		for i := range 30 {
			if slices.Contains(changed, i) {
				s.WriteString("changed\n")
			} else {
				s.WriteString("line " + string(rune('a'+i)) + "\n")
			}
		}
		return s.String()
	}
	if n := strings.Count(Unified("a", "b", long(), long(2, 20)), "@@ -"); n != 2 {
		t.Errorf("changes 18 lines apart: %d hunks, want 2", n)
	}
	if n := strings.Count(Unified("a", "b", long(), long(2, 8)), "@@ -"); n != 1 {
		t.Errorf("changes 6 lines apart: %d hunks, want 1", n)
	}
}

// The edit script of any two texts turns the first into the second, and
// keeps as many lines as the longest common subsequence.
func TestDiffLinesProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lines := func() []string {
		s := make([]string, r.IntN(12))
		for i := range s {
			s[i] = string(rune('a' + r.IntN(4)))
		}
		return s
	}
	for range 2000 {
		a, b := lines(), lines()
		if kept := checkScript(t, a, b, Lines(a, b)); kept != lcs(a, b) {
			t.Fatalf("Lines(%q, %q) keeps %d lines, the longest common subsequence has %d", a, b, kept, lcs(a, b))
		}
		// Past the bound on the edit distance, the script is longer but
		// still right.
		checkScript(t, a, b, linesUpTo(a, b, r.IntN(4)))
	}
}

// checkScript fails t unless es turns a into b, every line of a and of b
// in order, and returns how many lines it keeps.
func checkScript(t *testing.T, a, b []string, es []Edit) int {
	t.Helper()
	var got []string
	kept, ia, ib := 0, 0, 0
	for _, e := range es {
		switch e.Op {
		case ' ':
			if e.A != ia || e.B != ib || a[e.A] != b[e.B] {
				t.Fatalf("diff of %d and %d lines: kept line %d (%q) as line %d (%q), at lines %d and %d", len(a), len(b), e.A, a[e.A], e.B, b[e.B], ia, ib)
			}
			got, kept, ia, ib = append(got, a[e.A]), kept+1, ia+1, ib+1
		case '-':
			if e.A != ia || e.B != ib {
				t.Fatalf("diff of %d and %d lines: removed line %d at %d, %d, want %d, %d", len(a), len(b), e.A, e.A, e.B, ia, ib)
			}
			ia++
		case '+':
			if e.A != ia || e.B != ib {
				t.Fatalf("diff of %d and %d lines: added line %d at %d, %d, want %d, %d", len(a), len(b), e.B, e.A, e.B, ia, ib)
			}
			got, ib = append(got, b[e.B]), ib+1
		}
	}
	if ia != len(a) || !slices.Equal(got, b) && !(len(got) == 0 && len(b) == 0) {
		t.Fatalf("the diff of %d and %d lines goes through %d lines of the first and makes %d lines, not the second", len(a), len(b), ia, len(got))
	}
	return kept
}

// The memory of a diff grows with the square of the edit distance, which
// maxDiffEdits bounds, not with the distance times the length: an object
// of thousands of changed lines can still be diffed, so restored.
func TestDiffLinesMemory(t *testing.T) {
	numbered := func(prefix string, n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("%s %d", prefix, i)
		}
		return s
	}
	scattered := numbered("line", 20000)
	for i := 20; i < len(scattered); i += 40 {
		scattered[i] = "changed"
	}
	const bound = 16 << 20
	for _, c := range []struct {
		name string
		a, b []string
		kept int // the longest common subsequence
	}{
		{"4000 lines, all changed", numbered("a", 4000), numbered("b", 4000), 0},
		{"20000 lines, 500 changed", numbered("line", 20000), scattered, 19500},
		{"a line added to 20000", numbered("line", 20000), append(numbered("line", 20000), "new"), 20000},
	} {
		var es []Edit
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		es = Lines(c.a, c.b)
		runtime.ReadMemStats(&after)
		if kept := checkScript(t, c.a, c.b, es); kept != c.kept {
			t.Errorf("%s: the diff keeps %d lines, want %d", c.name, kept, c.kept)
		}
		n := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d KiB allocated", c.name, n>>10)
		if n > bound {
			t.Errorf("%s: the diff allocated %d MiB, want at most %d", c.name, n>>20, bound>>20)
		}
	}
}

func lcs(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}
