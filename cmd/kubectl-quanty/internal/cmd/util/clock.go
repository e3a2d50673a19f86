package util

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/quantyroot/quantykube/pkg/timearg"
)

// Clock is now and the zone times are printed in.
type Clock struct {
	now func() time.Time
	loc *time.Location
}

// Now is the time now.
func (c Clock) Now() time.Time { return c.now() }

// Age is how long ago unixMs was, as kubectl prints ages.
func (c Clock) Age(unixMs int64) string {
	if unixMs == 0 {
		return "<unknown>"
	}
	return duration.HumanDuration(c.now().Sub(time.UnixMilli(unixMs)))
}

// When is a commit time in RFC 3339, in the zone.
func (c Clock) When(unixMs int64) string { return timearg.Format(unixMs, c.loc) }

// ParseAt reads --at: a TIME (pkg/timearg).
func (c Clock) ParseAt(s string) (int64, error) {
	ms, err := timearg.ParseUnixMs(s, c.now())
	if err != nil {
		return 0, fmt.Errorf("--at: %w", err)
	}
	return ms, nil
}

// ParseSince reads --since and --until: a TIME, or a bare duration as
// kubectl logs --since takes it (1h: an hour ago; 2d: two days ago).
func (c Clock) ParseSince(flag, s string) (int64, error) {
	ms, err := timearg.SinceUnixMs(s, c.now())
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", flag, err)
	}
	return ms, nil
}

// PastTime reads a TIME flag (a bare duration as kubectl logs --since
// takes it too) that must not be in the future: history has nothing
// there, and a sign typed the wrong way round (+1h) is a mistake.
func (c Clock) PastTime(flag, v string) (int64, error) {
	now := c.now()
	ms, err := timearg.SinceUnixMs(v, now)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", flag, err)
	}
	if ms > now.UnixMilli() {
		return 0, fmt.Errorf("--%s %s is %s in the future: history ends now", flag, v,
			(time.Duration(ms-now.UnixMilli()) * time.Millisecond).Round(time.Second))
	}
	return ms, nil
}
