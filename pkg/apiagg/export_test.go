package apiagg

import "time"

// SetTimeouts shortens a server's idle and header timeouts before Serve.
func SetTimeouts(s *Server, idle, readHeader time.Duration) {
	s.limits.idle, s.limits.readHeader = idle, readHeader
}
