//go:build !linux

package sqlite

// gatheringVFS: the WAL's writes are gathered on Linux only, where they are
// tested (walvfs.go); elsewhere the writer uses SQLite's own VFS.
func gatheringVFS() (string, error) { return "", nil }
