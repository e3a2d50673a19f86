package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat. Linux fixes it at
// 100 for user space on every architecture this runs on, whatever the
// kernel's own tick rate.
const userHZ = 100

// cpuTime is the CPU time (user + system) a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return st.self, nil
}

// procStat is what the harness reads from /proc/PID/stat.
type procStat struct {
	ppid int
	// self is the process's own CPU time (utime + stime); reaped is its
	// children's that have exited and been waited for (cutime + cstime).
	self, reaped time.Duration
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) may hold spaces; the fields after it
	// (state, ppid, ..., utime 14, stime 15, cutime 16, cstime 17) are
	// counted from the ')' that closes it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var n [5]int64
	for j, k := range []int{1, 11, 12, 13, 14} {
		if n[j], err = strconv.ParseInt(f[k], 10, 64); err != nil {
			return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	tick := func(t int64) time.Duration { return time.Duration(t) * time.Second / userHZ }
	return procStat{ppid: int(n[0]), self: tick(n[1] + n[2]), reaped: tick(n[3] + n[4])}, nil
}

// treeCPU is the CPU time a process and all its children have used so far:
// its own, its exited children's, and its live children's (one level: a
// PostgreSQL postmaster's backends and workers are its children).
func treeCPU(pid int) (time.Duration, error) {
	root, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	total := root.self + root.reaped
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		st, err := readStat(child)
		if err != nil || st.ppid != pid {
			continue // gone since the listing, or not a child
		}
		total += st.self
	}
	return total, nil
}

// syscalls is how many read and write system calls (files and sockets) a
// process has made so far, from /proc/PID/io.
func syscalls(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if ok && (name == "syscr" || name == "syscw") {
			x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/io: %w", pid, err)
			}
			n += x
		}
	}
	return n, nil
}

// resetPeak sets a process's VmHWM back to its current RSS, so that the
// next reading is the peak of what follows.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}
