package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// The schedule is open-loop: update i falls due i/rate after the start,
// however late the ones before were, and a window holds rate per second.
func TestScheduleDue(t *testing.T) {
	start := time.Unix(1000, 0)
	s := schedule{start: start, rate: 500}
	for i, want := range map[int]time.Duration{0: 0, 1: 2 * time.Millisecond, 500: time.Second, 1499: 2998 * time.Millisecond} {
		if got := s.due(i).Sub(start); got != want {
			t.Errorf("rate 500: update %d due after %v, want %v", i, got, want)
		}
	}
	if n := s.count(time.Minute); n != 30_000 {
		t.Errorf("rate 500: %d updates due in a minute, want 30000", n)
	}
	s.rate = 50
	if got := s.due(3).Sub(start); got != 60*time.Millisecond {
		t.Errorf("rate 50: update 3 due after %v, want 60ms", got)
	}
	if n := s.count(1500 * time.Millisecond); n != 75 {
		t.Errorf("rate 50: %d updates due in 1.5s, want 75", n)
	}
	// 3 per second: the dues do not drift by rounding.
	s.rate = 3
	if got := s.due(3000).Sub(start); got != 1000*time.Second {
		t.Errorf("rate 3: update 3000 due after %v, want 1000s", got)
	}
}

// Each update's value carries its number, so no two revisions hold the
// same bytes, and keeps the size asked for.
func TestSteadyValue(t *testing.T) {
	val := strings.Repeat("v", 2048)
	a, b := steadyValue(val, 7), steadyValue(val, 8)
	if len(a) != 2048 || len(b) != 2048 || a == b || !strings.HasPrefix(a, "000000000007v") {
		t.Fatalf("values %q..., %q... (lengths %d, %d)", a[:16], b[:16], len(a), len(b))
	}
	if got := steadyValue("vv", 7); got != "000000000007" {
		t.Fatalf("short value: %q", got)
	}
}

func TestSummarizeSync(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	s := summarizeSync(lat)
	if s.n != 100 || s.p50 != 50*time.Millisecond || s.p99 != 99*time.Millisecond {
		t.Fatalf("got %+v, want 100 syncs, p50 50ms, p99 99ms", s)
	}
	if z := summarizeSync(nil); z.n != 0 || z.p99 != 0 {
		t.Fatalf("no syncs: %+v", z)
	}
}

// The probe syncs in the directory it is given, a bounded number of
// times, and leaves nothing behind.
func TestProbeSync(t *testing.T) {
	dir := t.TempDir()
	s, err := probeSync(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.n < 1 || s.n > syncProbes || s.p50 <= 0 || s.p99 < s.p50 {
		t.Fatalf("got %+v", s)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// The ratio table pairs QuantyKube's round with etcd's of the same
// round, whichever ran first.
func TestPrintSteadyRatios(t *testing.T) {
	ph := func(rate int, cpu time.Duration, n int) *steadyPhase {
		return &steadyPhase{rate: rate, cpu: cpu, updates: n, lat: []time.Duration{time.Millisecond}}
	}
	qk := &extraRun[*steadyResult]{t: target{name: "quantykube/sqlite"}, rounds: []*steadyResult{
		{round: 1, phases: []*steadyPhase{ph(50, 700*time.Millisecond, 1000)}},
		{round: 2, phases: []*steadyPhase{ph(50, 800*time.Millisecond, 1000)}},
	}}
	etcd := &extraRun[*steadyResult]{t: target{name: "etcd"}, rounds: []*steadyResult{
		{round: 1, phases: []*steadyPhase{ph(50, time.Second, 1000)}},
		{round: 2, phases: []*steadyPhase{ph(50, 2*time.Second, 1000)}},
	}}
	var b bytes.Buffer
	printSteady(&b, []*extraRun[*steadyResult]{qk, etcd}, steadyConfig{keys: 10, valueSize: 10})
	out := b.String()
	if !strings.Contains(out, "| quantykube/sqlite | 50 | no | 0.70, 0.40 | 0.55x (0.40-0.70) |") {
		t.Fatalf("no ratio row in:\n%s", out)
	}
	if strings.Count(out, "| 1 (1) | quantykube/sqlite |") != 1 || strings.Count(out, "| 2 (1) | etcd |") != 1 {
		t.Fatalf("rows not in each round's order:\n%s", out)
	}
}
