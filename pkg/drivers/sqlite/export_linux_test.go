package sqlite

// WALWrites counts, since the process started, SQLite's writes to WALs
// opened through the writer's VFS and the writes that reached the files.
func WALWrites() (sqlite, file int64) { return walWrites.Load(), walFileWrites.Load() }

var GatheringVFS = gatheringVFS
