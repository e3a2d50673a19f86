package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of the cgroup's memory limit the Go runtime
// is told it may use (GOMEMLIMIT): the collector works harder as the heap
// nears it instead of letting the kernel kill the process. The rest is
// for what the runtime does not count: SQLite's page caches, thread stacks
// and the binary's pages (ADR-041).
const memoryLimitShare = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit from the cgroup
// the process runs in, unless GOMEMLIMIT is set (the runtime has read it)
// or no cgroup limits memory. GOGC is left at Go's default (ADR-041 says
// what a lower one costs and saves).
func setMemoryLimit(log *slog.Logger) {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		log.Info("memory limit from GOMEMLIMIT", "gomemlimit", v)
		return
	}
	limit, dir, err := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
	switch {
	case err != nil:
		log.Warn("cannot read the cgroup's memory limit; the Go runtime has none", "err", err)
	case limit > 0:
		soft := int64(float64(limit) * memoryLimitShare)
		debug.SetMemoryLimit(soft)
		log.Info("memory limit from the cgroup", "cgroup", dir, "limit_bytes", limit, "gomemlimit_bytes", soft)
	}
}

// cgroupMemoryLimit is the tightest memory limit on the process's cgroup
// and its ancestors (0: none), read from procCgroup (/proc/self/cgroup)
// and the cgroup file system mounted at root: cgroup v2's memory.max, or
// v1's memory controller's memory.limit_in_bytes. dir is the cgroup whose
// limit it is.
func cgroupMemoryLimit(procCgroup, root string) (limit int64, dir string, err error) {
	f, err := os.Open(procCgroup)
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", nil // not Linux, or no /proc: no limit known
	}
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case strings.Contains(","+parts[1]+",", ",memory,"):
			v1 = parts[2]
		}
	}
	if err := sc.Err(); err != nil {
		return 0, "", fmt.Errorf("%s: %w", procCgroup, err)
	}
	switch {
	case v1 != "":
		return tightest(filepath.Join(root, "memory"), v1, "memory.limit_in_bytes")
	case v2 != "":
		return tightest(root, v2, "memory.max")
	}
	return 0, "", nil
}

// tightest walks from base/path up to base, reading file in each cgroup
// that has it, and returns the smallest limit found.
func tightest(base, path, file string) (limit int64, at string, err error) {
	dir := filepath.Join(base, filepath.Clean("/"+path))
	for {
		b, err := os.ReadFile(filepath.Join(dir, file))
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return 0, "", err
		default:
			s := strings.TrimSpace(string(b))
			if s != "max" {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return 0, "", fmt.Errorf("%s: %q is not a limit", filepath.Join(dir, file), s)
				}
				// cgroup v1 writes "no limit" as the largest page-aligned
				// int64.
				if n > 0 && n < math.MaxInt64/2 && (limit == 0 || n < limit) {
					limit, at = n, dir
				}
			}
		}
		if dir == base || len(dir) < len(base) {
			return limit, at, nil
		}
		dir = filepath.Dir(dir)
	}
}
