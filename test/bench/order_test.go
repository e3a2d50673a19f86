package main

import (
	"slices"
	"testing"
)

// Each round runs every target once, and over an even number of rounds
// every target's mean position is the middle: a drift that grows steadily
// through the run adds the same to each target's sum.
func TestRoundOrderCancelsSteadyDrift(t *testing.T) {
	for n := 1; n <= 4; n++ {
		for _, rounds := range []int{2, 4, 6} {
			posSum := make([]int, n)
			for r := 1; r <= rounds; r++ {
				order := roundOrder(n, r)
				if !slices.Equal(slices.Sorted(slices.Values(order)), roundOrder(n, 1)) {
					t.Fatalf("n=%d round %d: order %v does not run each target once", n, r, order)
				}
				for pos, target := range order {
					posSum[target] += pos
				}
			}
			for target, sum := range posSum {
				if 2*sum != rounds*(n-1) {
					t.Fatalf("n=%d, %d rounds: target %d's positions sum to %d, want %d", n, rounds, target, sum, rounds*(n-1)/2)
				}
			}
		}
	}
	if got, want := roundOrder(3, 1), []int{0, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("round 1: %v, want %v (the order given)", got, want)
	}
}
