// Package timearg reads and prints the TIME arguments of the command-line
// clients of History (quantykube history, kubectl-quanty): RFC 3339, a
// local date-time, "now", or a signed duration relative to now.
package timearg

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Layout is RFC 3339 with milliseconds, the precision of the store's
// commit times, so a printed time can be passed back to --at or --since.
const Layout = "2006-01-02T15:04:05.000Z07:00"

// localLayouts are accepted without a zone and read in the local zone.
var localLayouts = []string{
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
}

// relDays matches a relative time with a day component: -2d, -1d12h.
var relDays = regexp.MustCompile(`^([+-])(\d+)d(.*)$`)

// Parse reads a TIME argument: an RFC 3339 time (2024-05-01T12:00:00Z,
// fractional seconds allowed), a local date-time without a zone
// (2024-05-01 12:00:00), "now", or a signed duration relative to now
// (-15m, -2h, -1h30m, -2d, +5m).
func Parse(s string, now time.Time) (time.Time, error) { return parse(s, now, false) }

// parse is Parse; ago also takes a bare duration (1h, 2d, 1d12h) as that
// long ago, as kubectl logs --since does.
func parse(s string, now time.Time, ago bool) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, errors.New("empty time")
	case s == "now":
		return now, nil
	case s[0] == '-' || s[0] == '+':
		d, err := parseRelative(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("time %q: %v (want RFC 3339 or a relative time like -15m, -1h30m, -2d)", s, err)
		}
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range localLayouts {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			return t, nil
		}
	}
	// A bare duration: its digits first, so no absolute time above is one.
	if s[0] >= '0' && s[0] <= '9' {
		if d, err := parseRelative("-" + s); err == nil {
			if ago {
				return now.Add(d), nil
			}
			return time.Time{}, fmt.Errorf("time %q: a relative time needs a sign: -%s means %s ago", s, s, s)
		}
	}
	if ago {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2024-05-01T12:00:00Z), a relative time like -15m, or a duration like 1h, 2d, 1d12h (that long ago)", s)
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2024-05-01T12:00:00Z) or a relative time like -15m, -1h30m, -2d", s)
}

// parseRelative parses a signed Go duration, with an optional leading
// number of days.
func parseRelative(s string) (time.Duration, error) {
	var days time.Duration
	if m := relDays.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[2], 10, 32)
		if err != nil || n > 100000 {
			return 0, fmt.Errorf("bad day count %q", m[2])
		}
		days = time.Duration(n) * 24 * time.Hour
		rest := time.Duration(0)
		if m[3] != "" {
			if m[3][0] == '-' || m[3][0] == '+' {
				return 0, errors.New("one sign only")
			}
			if rest, err = time.ParseDuration(m[3]); err != nil {
				return 0, err
			}
		}
		d := days + rest
		if m[1] == "-" {
			d = -d
		}
		return d, nil
	}
	if len(s) < 2 || s[1] == '-' || s[1] == '+' {
		return 0, errors.New("one sign only")
	}
	return time.ParseDuration(s)
}

// UnixMs converts a TIME for a request; 0 would mean "now" to the
// server, so times at or before the epoch are refused.
func UnixMs(t time.Time) (int64, error) {
	ms := t.UnixMilli()
	if ms <= 0 {
		return 0, fmt.Errorf("time %s is not after 1970-01-01T00:00:00Z", t.Format(time.RFC3339))
	}
	return ms, nil
}

// ParseUnixMs reads a TIME argument (Parse) as a request's unix_ms
// (UnixMs).
func ParseUnixMs(s string, now time.Time) (int64, error) { return unixMsOf(parse(s, now, false)) }

// SinceUnixMs is ParseUnixMs for flags that, as kubectl logs --since,
// also take a bare duration: 1h, 2d and 1d12h mean that long ago.
func SinceUnixMs(s string, now time.Time) (int64, error) { return unixMsOf(parse(s, now, true)) }

func unixMsOf(t time.Time, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return UnixMs(t)
}

// Format renders a commit time in RFC 3339 with milliseconds in loc.
func Format(unixMs int64, loc *time.Location) string {
	if unixMs == 0 {
		return "-"
	}
	return time.UnixMilli(unixMs).In(loc).Format(Layout)
}
