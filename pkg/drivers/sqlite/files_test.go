//go:build unix

package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// withUmask runs the test under umask 022, the usual one, whatever the
// environment's: files made with the default mode would be world-readable.
func withUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
}

// wantPrivate fails unless path exists with mode 0600: the database holds
// every Secret of the cluster.
func wantPrivate(t *testing.T, path string) {
	t.Helper()
	wantMode(t, path, 0o600)
}

// A backup is readable by its owner only, like the store it copies.
func TestBackupFileIsPrivate(t *testing.T) {
	withUmask(t)
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "state.db"))
	put(t, s, "/registry/secrets/default/s", "secret")
	d := dialect(t, filepath.Join(dir, "state.db"))
	dest := filepath.Join(dir, "backup.db")
	if _, err := d.Backup(context.Background(), dest); err != nil {
		t.Fatal(err)
	}
	wantPrivate(t, dest)
}

// A new store's database, its WAL and shared-memory file, and its lock are
// readable by their owner only: SQLite gives the WAL and shared memory the
// database's mode.
func TestStoreFilesArePrivate(t *testing.T) {
	withUmask(t)
	path := filepath.Join(t.TempDir(), "db", "state.db")
	s := openStore(t, path)
	put(t, s, "/registry/secrets/default/s", "secret")
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-lock"} {
		wantPrivate(t, p)
	}
	wantMode(t, filepath.Dir(path), 0o700)
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != want {
		t.Errorf("%s has mode %#o, want %#o", filepath.Base(path), mode, want)
	}
}

// A store made world-readable (by an older QuantyKube, which let SQLite
// create it 0644, or copied in with cp) is made private when it is opened,
// WAL and shared memory included.
func TestOpenMakesAnOldStorePrivate(t *testing.T) {
	withUmask(t)
	path := filepath.Join(t.TempDir(), "state.db")
	s := openStore(t, path)
	put(t, s, "/registry/secrets/default/s", "secret")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, path)
	put(t, s, "/registry/secrets/default/t", "secret")
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		wantPrivate(t, p)
	}
}
