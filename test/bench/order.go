package main

// roundOrder is the order in which round r (from 1) runs n targets: as
// given in odd rounds, reversed in even ones. On these shared machines a
// run drifts (other tenants, thermal state, the page cache) by more than
// most gaps worth measuring, and whichever target runs second in a fixed
// order gained 5-10% over the first in A/A runs of one build against
// itself. Alternating gives each target every position equally often, so
// a drift that is steady over the run favours none.
func roundOrder(n, r int) []int {
	order := make([]int, n)
	for i := range order {
		if r%2 == 1 {
			order[i] = i
		} else {
			order[i] = n - 1 - i
		}
	}
	return order
}
