package replicate

import (
	"testing"
	"time"
)

// The chain resumes after the newest base's contiguous segments, and the
// next scheduled base is counted from the base's last commit, or, for a
// base of a store that had none, from the first commit after it, or now.
func TestResumePoint(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for _, tc := range []struct {
		name    string
		l       Listing
		shipped int64
		baseAt  time.Time
		ok      bool
	}{
		{"no base", Listing{Segments: []Segment{{First: 1, Last: 5}}}, 0, time.Time{}, false},
		{"base and contiguous segments", Listing{
			Bases:    []Base{{Rev: 1, UnixMs: 0}, {Rev: 10, UnixMs: 1_700_000_000_000}},
			Segments: []Segment{{First: 2, Last: 9}, {First: 8, Last: 12}, {First: 13, Last: 20}, {First: 22, Last: 30}},
		}, 20, time.UnixMilli(1_700_000_000_000), true},
		{"base of an empty store", Listing{
			Bases:    []Base{{Rev: 1, UnixMs: 0}},
			Segments: []Segment{{First: 2, Last: 4, T0: 1_799_000_000_000}},
		}, 4, time.UnixMilli(1_799_000_000_000), true},
		{"base of an empty store, nothing after it", Listing{
			Bases: []Base{{Rev: 1, UnixMs: 0}},
		}, 1, now, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shipped, baseAt, ok := resumePoint(tc.l, now)
			if shipped != tc.shipped || !baseAt.Equal(tc.baseAt) || ok != tc.ok {
				t.Fatalf("resumePoint = %d, %v, %v; want %d, %v, %v", shipped, baseAt, ok, tc.shipped, tc.baseAt, tc.ok)
			}
		})
	}
}
