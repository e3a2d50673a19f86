package main

import (
	"errors"
	"testing"
	"time"
)

// The paired table compares the two targets round by round, leaving out a
// round either of them failed, and prints the median with its range.
func TestPairedRatios(t *testing.T) {
	round := func(rate float64, err error) *roundResult {
		l := &levelResult{clients: 64, create: opStats{ops: int(rate), elapsed: time.Second}}
		return &roundResult{levels: []*levelResult{l}, err: err}
	}
	q := &targetResult{rounds: []*roundResult{round(100, nil), round(120, nil), round(500, nil), round(90, nil)}}
	p := &targetResult{rounds: []*roundResult{round(100, nil), round(100, nil), round(100, errors.New("failed")), round(100, nil)}}
	pairs := pairedLevels(q, p, 64)
	var rs []float64
	for _, pr := range pairs {
		rs = append(rs, pr[0].create.rate()/pr[1].create.rate())
	}
	if got, want := fmtMedian(rs), "1.00x (0.90-1.20)"; got != want {
		t.Fatalf("median of %v: %s, want %s (round 3 failed for the peer and is left out)", rs, got, want)
	}
	if got, want := fmtMedian([]float64{1.1, 0.9}), "1.00x (0.90-1.10)"; got != want {
		t.Fatalf("median of two: %s, want %s", got, want)
	}
	if pairedLevels(q, p, 16) != nil {
		t.Fatal("pairs at a client count neither ran")
	}
}
