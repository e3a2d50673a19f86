package mvcc_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// TestRingKeepFollowsTheLiveData: with no watch behind, the ring keeps as
// much of the read events as the live values' bytes, at least 1 MiB and at
// most RingKeepBytes.
func TestRingKeepFollowsTheLiveData(t *testing.T) {
	const valueSize = 16 << 10
	value := bytes.Repeat([]byte("v"), valueSize)
	for _, tc := range []struct {
		name     string
		keys     int // live keys of valueSize each
		keep     int // RingKeepBytes
		min, max int // what the ring may hold after the updates
	}{
		// 160 KiB of live values: the floor, 1 MiB.
		{name: "small store keeps the floor", keys: 10, keep: 4 << 20, min: 1<<20 - 2*valueSize, max: 1<<20 + 2*valueSize},
		// 2.5 MiB of live values: as much as them.
		{name: "keeps as much as the live values", keys: 160, keep: 4 << 20, min: 5<<19 - 2*valueSize, max: 5<<19 + 2*valueSize},
		// 2.5 MiB of live values, RingKeepBytes 2 MiB: the bound.
		{name: "never more than RingKeepBytes", keys: 160, keep: 2 << 20, min: 2<<20 - 2*valueSize, max: 2<<20 + 2*valueSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, mvcc.Options{RingKeepBytes: tc.keep})
			for i := range tc.keys {
				put(t, s, fmt.Sprintf("/k/%03d", i), value)
			}
			// 6 MiB of updates: past every keep, within RingBytes' 16 MiB.
			for i := range 6 << 20 / valueSize {
				put(t, s, fmt.Sprintf("/k/%03d", i%tc.keys), value)
			}
			if got := s.RingBytes(); got < tc.min || got > tc.max {
				t.Fatalf("the ring holds %d bytes, want %d to %d", got, tc.min, tc.max)
			}
		})
	}
}
