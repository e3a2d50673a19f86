// Package reaper removes a throwaway database server a test process
// started (test/pgtest's PostgreSQL, test/mytest's MariaDB) once that
// process has ended without removing it itself: a test binary killed by
// go test's timeout or by a signal runs no cleanup, and the server, which
// runs detached or in a process group of its own, would run on with its
// data directory.
package reaper

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// script waits for its standard input to close, then signals the process
// whose number is the first line of $QK_REAP_PID while its command line
// holds $QK_REAP_NAME (a pid file left by a crash may name a process that
// reused the number), waits up to 10 s for it to end, and removes
// $QK_REAP_DIR.
const script = `read -r _
pid=$(head -n 1 "$QK_REAP_PID" 2>/dev/null)
if [ -n "$pid" ] && grep -q "$QK_REAP_NAME" "/proc/$pid/cmdline" 2>/dev/null; then
	kill -"$QK_REAP_SIGNAL" "$pid" 2>/dev/null
	i=0
	while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i+1)); done
fi
rm -rf "$QK_REAP_DIR"`

// Server names what a reaper removes: the directory, the server's pid
// file and its program's name, and the signal that stops it (QUIT for
// PostgreSQL's immediate shutdown, KILL for MariaDB).
type Server struct {
	Dir, PIDFile, Name, Signal string
}

// Reaper waits for the end of this process, on a pipe whose only write
// end this process holds (close-on-exec, so no child inherits it): the
// kernel closes it however the process ends.
type Reaper struct {
	w *os.File
}

// Start starts the reaper of s. It has a process group of its own, so
// that a signal to the test's group does not take it too.
func Start(s Server) (*Reaper, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("reaper: pipe: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Stdin = r
	cmd.Env = append(os.Environ(), "QK_REAP_DIR="+s.Dir, "QK_REAP_PID="+s.PIDFile, "QK_REAP_NAME="+s.Name, "QK_REAP_SIGNAL="+s.Signal)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("reaper: start: %w", err)
	}
	go func() { _ = cmd.Wait() }() // it ends after Close, or after this process
	return &Reaper{w: w}, nil
}

// Close lets the reaper end, once the caller has removed the server
// itself: it finds nothing left. Close on a nil Reaper does nothing.
func (r *Reaper) Close() {
	if r != nil && r.w != nil {
		r.w.Close()
		r.w = nil
	}
}
