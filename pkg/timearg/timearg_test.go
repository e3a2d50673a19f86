package timearg

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	zone := time.FixedZone("X", 2*3600)
	now := time.Date(2025, 3, 10, 12, 0, 0, 0, zone)
	cases := []struct {
		in   string
		want time.Time
	}{
		{"now", now},
		{"-15m", now.Add(-15 * time.Minute)},
		{"-2h", now.Add(-2 * time.Hour)},
		{"-1h30m", now.Add(-90 * time.Minute)},
		{"-90s", now.Add(-90 * time.Second)},
		{"-1.5h", now.Add(-90 * time.Minute)},
		{"-250ms", now.Add(-250 * time.Millisecond)},
		{"+5m", now.Add(5 * time.Minute)},
		{"-2d", now.Add(-48 * time.Hour)},
		{"-1d12h", now.Add(-36 * time.Hour)},
		{" -15m ", now.Add(-15 * time.Minute)},
		{"2025-03-10T09:30:00Z", time.Date(2025, 3, 10, 9, 30, 0, 0, time.UTC)},
		{"2025-03-10T09:30:00.123Z", time.Date(2025, 3, 10, 9, 30, 0, 123e6, time.UTC)},
		{"2025-03-10T11:30:00+02:00", time.Date(2025, 3, 10, 9, 30, 0, 0, time.UTC)},
		{"2025-03-10T09:30:00.5-05:00", time.Date(2025, 3, 10, 14, 30, 0, 5e8, time.UTC)},
		{"2025-03-10 11:30:00", time.Date(2025, 3, 10, 11, 30, 0, 0, zone)},
		{"2025-03-10T11:30:00.250", time.Date(2025, 3, 10, 11, 30, 0, 25e7, zone)},
		{"2025-03-10 11:30", time.Date(2025, 3, 10, 11, 30, 0, 0, zone)},
		{"2025-03-10", time.Date(2025, 3, 10, 0, 0, 0, 0, zone)},
	}
	for _, c := range cases {
		got, err := Parse(c.in, now)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if !got.Equal(c.want) {
			t.Errorf("Parse(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	bad := map[string]string{
		"":                     "empty",
		"15m":                  "needs a sign: -15m",
		"2d":                   "needs a sign: -2d",
		"-":                    "relative",
		"--15m":                "one sign",
		"-+15m":                "one sign",
		"-1d-2h":               "one sign",
		"-15x":                 "relative",
		"yesterday":            "RFC 3339",
		"2025-13-01T00:00:00Z": "RFC 3339",
		"2025-03-10T09:30:00":  "", // valid: local
		"-99999999999d":        "day count",
	}
	for in, want := range bad {
		_, err := Parse(in, now)
		if want == "" {
			if err != nil {
				t.Errorf("Parse(%q): %v", in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

func TestUnixMs(t *testing.T) {
	if ms, err := UnixMs(time.UnixMilli(1741600000123)); err != nil || ms != 1741600000123 {
		t.Fatalf("timeToUnixMs = %d, %v", ms, err)
	}
	for _, tm := range []time.Time{time.Unix(0, 0), time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := UnixMs(tm); err == nil {
			t.Errorf("UnixMs(%v): want an error (0 would mean now)", tm)
		}
	}
}

func TestParseUnixMs(t *testing.T) {
	now := time.UnixMilli(1741600000123)
	if ms, err := ParseUnixMs("-1s", now); err != nil || ms != 1741599999123 {
		t.Fatalf("ParseUnixMs(-1s) = %d, %v", ms, err)
	}
	for in, want := range map[string]string{
		"yesterday":            "RFC 3339",
		"1970-01-01T00:00:00Z": "not after 1970",
		"-30000d":              "not after 1970",
	} {
		if _, err := ParseUnixMs(in, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseUnixMs(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

// A --since flag takes a bare duration as kubectl logs --since does, with
// days as every relative time; whatever else it takes is a TIME.
func TestSinceUnixMs(t *testing.T) {
	now := time.Date(2025, 3, 10, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"1h":                   now.Add(-time.Hour),
		"90s":                  now.Add(-90 * time.Second),
		"1d":                   now.Add(-24 * time.Hour),
		" 1d12h ":              now.Add(-36 * time.Hour),
		"-2d":                  now.Add(-48 * time.Hour),
		"+5m":                  now.Add(5 * time.Minute),
		"now":                  now,
		"2025-03-10":           time.Date(2025, 3, 10, 0, 0, 0, 0, time.UTC),
		"2025-03-09T10:00:00Z": time.Date(2025, 3, 9, 10, 0, 0, 0, time.UTC),
	} {
		ms, err := SinceUnixMs(in, now)
		if err != nil || ms != want.UnixMilli() {
			t.Errorf("SinceUnixMs(%q) = %d, %v; want %d (%s)", in, ms, err, want.UnixMilli(), want.Format(time.RFC3339))
		}
	}
	for in, want := range map[string]string{
		"1x":      "or a duration like 1h, 2d, 1d12h (that long ago)",
		"1d-2h":   "or a duration like 1h",
		"30000d":  "not after 1970",
		"":        "empty",
		"2025-13": "or a duration like 1h",
	} {
		if _, err := SinceUnixMs(in, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SinceUnixMs(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

func TestFormatRoundTrips(t *testing.T) {
	zone := time.FixedZone("X", -7*3600)
	ms := int64(1741600000123)
	s := Format(ms, zone)
	if s != "2025-03-10T02:46:40.123-07:00" {
		t.Fatalf("formatTime = %q", s)
	}
	back, err := Parse(s, time.Now())
	if err != nil || back.UnixMilli() != ms {
		t.Fatalf("Parse(formatTime) = %v (%d), %v; want %d", back, back.UnixMilli(), err, ms)
	}
	if got := Format(ms, time.UTC); got != "2025-03-10T09:46:40.123Z" {
		t.Fatalf("formatTime UTC = %q", got)
	}
	if got := Format(0, zone); got != "-" {
		t.Fatalf("Format(0) = %q", got)
	}
}
