package sqlite

import (
	"sync/atomic"

	"modernc.org/libc"
	lib "modernc.org/sqlite/lib"
)

// WALWrites counts, since the process started, SQLite's writes to WALs
// opened through the writer's VFS and the writes that reached the files.
func WALWrites() (sqlite, file int64) { return walWrites.Load(), walFileWrites.Load() }

var GatheringVFS = gatheringVFS

// FailWALWrites makes writes to WAL files fail with SQLITE_FULL, as on a
// full disk, until the returned function is called.
func FailWALWrites() (stop func()) {
	var failing atomic.Bool
	failing.Store(true)
	orig := fileWrite
	fileWrite = func(tls *libc.TLS, w *walFile, p uintptr, n int32, off int64) int32 {
		if failing.Load() {
			return lib.SQLITE_FULL
		}
		return orig(tls, w, p, n, off)
	}
	return func() { failing.Store(false) }
}
