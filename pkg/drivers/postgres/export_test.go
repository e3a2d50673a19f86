package postgres

import "time"

// SetProbeTimeout shortens the LISTEN probe's wait for a test; the
// returned function restores it.
func SetProbeTimeout(d time.Duration) func() {
	old := probeTimeout
	probeTimeout = d
	return func() { probeTimeout = old }
}
