package lazyfs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
)

// mountT mounts a lazy file system for t, or ends t when FUSE cannot be
// mounted here (a failure under CI=true).
func mountT(t *testing.T) *FS {
	t.Helper()
	if os.Geteuid() != 0 {
		framework.Unavailable(t, "FUSE", syscall.EPERM)
	}
	f, err := Mount(t.TempDir())
	if err != nil {
		framework.Unavailable(t, "FUSE", err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

func writeFile(t *testing.T, path string, off int64, data []byte, sync func(*os.File) error) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if sync != nil {
		if err := sync(fh); err != nil {
			t.Fatal(err)
		}
	}
}

func fsync(f *os.File) error     { return f.Sync() }
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

func cut(t *testing.T, f *FS) int {
	t.Helper()
	n, err := f.PowerCut()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func wantContent(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes %.40q..., want %d bytes %.40q...", filepath.Base(path), len(got), got, len(want), want)
	}
}

func TestPowerCutKeepsOnlySynced(t *testing.T) {
	f := mountT(t)
	a, b, c := filepath.Join(f.Dir(), "a"), filepath.Join(f.Dir(), "b"), filepath.Join(f.Dir(), "c")
	synced := bytes.Repeat([]byte("s"), 10000)
	writeFile(t, a, 0, synced, fsync)
	writeFile(t, a, 10000, []byte("appended, never synced"), nil)
	writeFile(t, a, 100, []byte("overwritten, never synced"), nil)
	writeFile(t, b, 0, []byte("never synced"), nil)
	writeFile(t, c, 0, []byte("synced with fdatasync"), fdatasync)
	// Before the cut, every write is there, as with any file system.
	want := append(bytes.Clone(synced), "appended, never synced"...)
	copy(want[100:], "overwritten, never synced")
	wantContent(t, a, want)

	if lost := cut(t, f); lost == 0 {
		t.Fatal("the cut lost no pages")
	}
	wantContent(t, a, synced)
	wantContent(t, b, nil) // the file stays (the namespace is durable), its data does not
	wantContent(t, c, []byte("synced with fdatasync"))
	if s := f.Stats(); s.Cuts != 1 || s.Syncs != 2 {
		t.Fatalf("stats %+v", s)
	}

	// A second cut with nothing written loses nothing.
	if lost := cut(t, f); lost != 0 {
		t.Fatalf("a cut after a cut lost %d pages", lost)
	}
	wantContent(t, a, synced)
}

func TestTruncate(t *testing.T) {
	f := mountT(t)
	p := filepath.Join(f.Dir(), "t")
	data := bytes.Repeat([]byte("d"), 3*pageSize+100)
	writeFile(t, p, 0, data, fsync)
	if err := os.Truncate(p, pageSize+10); err != nil {
		t.Fatal(err)
	}
	// Extended again by a write: the truncated bytes read as zeros.
	writeFile(t, p, 3*pageSize, []byte("x"), nil)
	want := make([]byte, 3*pageSize+1)
	copy(want, data[:pageSize+10])
	want[3*pageSize] = 'x'
	wantContent(t, p, want)
	// The truncation was never synced.
	cut(t, f)
	wantContent(t, p, data)

	// Synced, it stays.
	if err := os.Truncate(p, 10); err != nil {
		t.Fatal(err)
	}
	writeFile(t, p, 0, nil, fsync)
	cut(t, f)
	wantContent(t, p, data[:10])
	writeFile(t, p, 20, []byte("y"), fsync)
	want = make([]byte, 21)
	copy(want, data[:10])
	want[20] = 'y'
	wantContent(t, p, want)
}

func TestNamespaceIsDurable(t *testing.T) {
	f := mountT(t)
	d := filepath.Join(f.Dir(), "dir")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d, "x"), 0, []byte("x"), fsync)
	writeFile(t, filepath.Join(d, "gone"), 0, []byte("g"), fsync)
	if err := os.Rename(filepath.Join(d, "x"), filepath.Join(f.Dir(), "y")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d, "gone")); err != nil {
		t.Fatal(err)
	}
	cut(t, f)
	wantContent(t, filepath.Join(f.Dir(), "y"), []byte("x"))
	entries, err := os.ReadDir(d)
	if err != nil || len(entries) != 0 {
		t.Fatalf("dir after the cut: %v %v", entries, err)
	}
	if err := os.Remove(d); err != nil {
		t.Fatal(err)
	}
}

// TestSharedMmap is what SQLite does with its WAL index (the -shm file):
// a shared writable mapping, read back through read(2). The mapping is
// written by a child process: a page fault on a FUSE file waits for the
// file system's server, and with that server in the same Go process a
// garbage collection can stop the server's goroutines while it waits for
// the faulting thread, which never returns (a deadlock this test hit).
// SQLite, like the child, is never the process that serves the mount.
func TestSharedMmap(t *testing.T) {
	if p := os.Getenv(mmapChildEnv); p != "" {
		writeMapped(t, p)
		return
	}
	f := mountT(t)
	p := filepath.Join(f.Dir(), "shm")
	fh, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(2 * pageSize); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSharedMmap$", "-test.count=1")
	child.Env = append(os.Environ(), mmapChildEnv+"="+p)
	if out, err := child.CombinedOutput(); err != nil {
		t.Fatalf("the child that writes through the mapping: %v\n%s", err, out)
	}
	got := make([]byte, 6)
	if _, err := fh.ReadAt(got, pageSize); err != nil || string(got) != "mapped" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// mmapChildEnv names the file TestSharedMmap's child maps and writes.
const mmapChildEnv = "QUANTY_LAZYFS_MMAP_CHILD"

func writeMapped(t *testing.T, p string) {
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	m, err := syscall.Mmap(int(fh.Fd()), 0, 2*pageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(m[pageSize:], "mapped")
	if err := syscall.Munmap(m); err != nil {
		t.Fatal(err)
	}
}
