package mvcc

import (
	"strings"
	"testing"
	"time"
)

// Liveness fails only for a writer that has made no progress for
// writerStall and is not waiting on the database.
func TestCheckWriterAliveStall(t *testing.T) {
	w := &writer{born: time.Now().Add(-2 * writerStall)} // last beat at born
	s := &Store{writer: w}
	if err := s.CheckWriterAlive(t.Context()); err == nil || !strings.Contains(err.Error(), "no progress") {
		t.Errorf("a writer silent for %s: %v", 2*writerStall, err)
	}
	w.enterDB()
	if err := s.CheckWriterAlive(t.Context()); err != nil {
		t.Errorf("a silent writer waiting on the database: %v", err)
	}
	w.leaveDB()
	if err := s.CheckWriterAlive(t.Context()); err != nil {
		t.Errorf("a writer that has just made progress: %v", err)
	}
}
