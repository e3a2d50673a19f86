// Package lazyfs is a FUSE file system for power-loss tests, after the
// LazyFS that etcd's robustness tests use: it keeps what is written to a
// file since that file's last fsync or fdatasync in a volatile layer, and
// PowerCut throws every volatile layer away, as a machine losing power
// loses the page cache. A test that only kills its server (kill -9) cannot
// tell a missing fsync from a correct one: the operating system still has
// the data. On this file system it can.
//
// The model, and its limits:
//
//   - File contents and sizes are volatile until the file is synced:
//     writes and truncations since the last fsync/fdatasync of the file are
//     lost at a power cut, whole; what was synced survives. Pages are 4 KiB:
//     a write that was not synced is lost with the pages it touched,
//     never in part of a page (LazyFS's default is the same; real disks
//     may tear a sector, which this does not model).
//   - The namespace is durable at once: a created, renamed or removed file
//     or directory stays so after a cut, as a journaling file system's
//     metadata usually does after its next commit. SQLite syncs the
//     directory after creating its WAL anyway.
//   - Everything is in memory (this process's), durable layer included; a
//     file system lives as long as the test that mounted it.
//   - syncfs and the kernel's writeback at unmount do not make anything
//     durable: only an fsync or fdatasync of the file itself does.
//
// Mounting needs /dev/fuse and root (the mount is made with mount(2)
// directly; no fusermount is needed).
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

const pageSize = 4096

type page [pageSize]byte

// file is one regular file: its durable contents, and what was written
// since its last sync.
type file struct {
	mu    sync.Mutex
	mode  uint32
	mtime time.Time
	// size and dirty are the file as processes see it: dirty holds every
	// page written (or zeroed by a truncation, as a nil page) since the
	// last sync, over the durable pages.
	size  int64
	dirty map[int64]*page
	// dsize and durable are what survives a power cut.
	dsize   int64
	durable map[int64]*page
}

func newFile(mode uint32) *file {
	return &file{mode: mode, mtime: time.Now(), dirty: map[int64]*page{}, durable: map[int64]*page{}}
}

// pageAt is page i as processes see it (nil: zeros).
func (f *file) pageAt(i int64) *page {
	if p, ok := f.dirty[i]; ok {
		return p
	}
	return f.durable[i]
}

// writable is page i in the volatile layer, copied there first if needed.
func (f *file) writable(i int64) *page {
	if p := f.dirty[i]; p != nil {
		return p
	}
	p := new(page)
	if old := f.pageAt(i); old != nil {
		*p = *old
	}
	f.dirty[i] = p
	return p
}

func (f *file) read(dest []byte, off int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= f.size {
		return 0
	}
	n := int(min(int64(len(dest)), f.size-off))
	for done := 0; done < n; {
		pos := off + int64(done)
		i, o := pos/pageSize, int(pos%pageSize)
		chunk := min(n-done, pageSize-o)
		if p := f.pageAt(i); p != nil {
			copy(dest[done:done+chunk], p[o:o+chunk])
		} else {
			clear(dest[done : done+chunk])
		}
		done += chunk
	}
	return n
}

func (f *file) write(data []byte, off int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for done := 0; done < len(data); {
		pos := off + int64(done)
		i, o := pos/pageSize, int(pos%pageSize)
		done += copy(f.writable(i)[o:], data[done:])
	}
	f.size = max(f.size, off+int64(len(data)))
	f.mtime = time.Now()
}

// truncate sets the size. Bytes past the size always read as zeros, in the
// volatile layer and the durable one, so a later extension reads zeros.
func (f *file) truncate(size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if size < f.size {
		first := (size + pageSize - 1) / pageSize // the first page wholly past size
		for i := range f.dirty {
			if i >= first {
				f.dirty[i] = nil
			}
		}
		for i := range f.durable {
			if i >= first {
				f.dirty[i] = nil
			}
		}
		if o := size % pageSize; o != 0 && f.pageAt(size/pageSize) != nil {
			clear(f.writable(size / pageSize)[o:])
		}
	}
	f.size = size
	f.mtime = time.Now()
}

// sync makes the volatile layer durable.
func (f *file) sync() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range f.dirty {
		if p == nil {
			delete(f.durable, i)
		} else {
			f.durable[i] = p
		}
	}
	f.dirty = map[int64]*page{}
	f.dsize = f.size
}

// cut throws the volatile layer away and returns how many pages it held.
func (f *file) cut() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.dirty)
	f.dirty = map[int64]*page{}
	f.size = f.dsize
	return n
}

func (f *file) attr(out *fuse.Attr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out.Mode = syscall.S_IFREG | f.mode
	out.Size = uint64(f.size)
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = pageSize
	out.Nlink = 1
	out.SetTimes(nil, &f.mtime, &f.mtime)
}

// dir is a directory: its entries are *dir or *file.
type dir struct {
	mode    uint32
	entries map[string]any
}

func newDir(mode uint32) *dir { return &dir{mode: mode, entries: map[string]any{}} }

// FS is a mounted lazy file system.
type FS struct {
	mountpoint string
	// mu guards the namespace (every dir's entries) and the counters.
	mu     sync.Mutex
	root   *dir
	server *fuse.Server
	syncs  int64
	cuts   int
	lost   int64
}

// Mount mounts an empty lazy file system on mountpoint, an existing
// directory.
func Mount(mountpoint string) (*FS, error) {
	f := &FS{mountpoint: mountpoint, root: newDir(0o755)}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FS) mount() error {
	zero := time.Duration(0)
	root := &dirNode{fs: f, d: f.root}
	server, err := fs.Mount(f.mountpoint, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount:       true,
			DirectMountStrict: true,
			FsName:            "lazyfs",
			Name:              "lazyfs",
			DisableXAttrs:     true,
		},
		// Every stat asks the file system: the sizes it reports are the
		// volatile layer's, and a cut changes them.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
	})
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.mountpoint, err)
	}
	f.server = server
	return nil
}

// Dir is where the file system is mounted.
func (f *FS) Dir() string { return f.mountpoint }

// Stats is what the file system has seen.
type Stats struct {
	// Syncs counts fsync and fdatasync calls on files.
	Syncs int64
	// Cuts counts power cuts; LostPages the pages they threw away.
	Cuts      int
	LostPages int64
}

func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{Syncs: f.syncs, Cuts: f.cuts, LostPages: f.lost}
}

// PowerCut loses everything not synced: it unmounts the file system, throws
// every file's volatile layer away and mounts what was durable again. The
// processes using the file system must be gone (killed): a cut does not
// wait for them, and unmounting fails while a file is open. Remounting
// also drops the kernel's caches, which still held the lost writes.
func (f *FS) PowerCut() (lostPages int, err error) {
	// Writeback at unmount reaches the volatile layers, which go next.
	if err := f.unmount(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	lostPages = f.root.cut()
	f.cuts++
	f.lost += int64(lostPages)
	f.mu.Unlock()
	return lostPages, f.mount()
}

func (d *dir) cut() int {
	n := 0
	for _, e := range d.entries {
		switch e := e.(type) {
		case *file:
			n += e.cut()
		case *dir:
			n += e.cut()
		}
	}
	return n
}

// Unmount unmounts the file system for good.
func (f *FS) Unmount() error { return f.unmount() }

func (f *FS) unmount() error {
	if f.server == nil {
		return nil
	}
	var err error
	// A process that just died may still hold the mount for a moment.
	for range 50 {
		if err = f.server.Unmount(); err == nil || !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("lazyfs: unmount %s: %w", f.mountpoint, err)
	}
	f.server.Wait()
	f.server = nil
	return nil
}

// dirNode and fileNode are the kernel's view of a dir and a file for one
// mount; the dir and file outlive it.
type dirNode struct {
	fs.Inode
	fs *FS
	d  *dir
}

type fileNode struct {
	fs.Inode
	fs *FS
	f  *file
}

var (
	_ fs.NodeOnAdder   = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeFsyncer   = (*dirNode)(nil)
	_ fs.NodeStatfser  = (*dirNode)(nil)

	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
	_ fs.NodeWriter    = (*fileNode)(nil)
	_ fs.NodeFsyncer   = (*fileNode)(nil)
	_ fs.NodeFlusher   = (*fileNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
)

// OnAdd rebuilds the kernel's tree from the durable namespace at mount.
func (n *dirNode) OnAdd(ctx context.Context) {
	if n.d != n.fs.root {
		return
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	n.addChildren(ctx)
}

func (n *dirNode) addChildren(ctx context.Context) {
	for name, e := range n.d.entries {
		ch := n.fs.inode(ctx, &n.Inode, e)
		n.AddChild(name, ch, true)
		if d, ok := ch.Operations().(*dirNode); ok {
			d.addChildren(ctx)
		}
	}
}

func (f *FS) inode(ctx context.Context, parent *fs.Inode, e any) *fs.Inode {
	switch e := e.(type) {
	case *dir:
		return parent.NewPersistentInode(ctx, &dirNode{fs: f, d: e}, fs.StableAttr{Mode: syscall.S_IFDIR})
	case *file:
		return parent.NewPersistentInode(ctx, &fileNode{fs: f, f: e}, fs.StableAttr{Mode: syscall.S_IFREG})
	}
	panic(fmt.Sprintf("lazyfs: entry of type %T", e))
}

func (n *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | n.d.mode
	out.Nlink = 2
	return 0
}

func (n *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if _, ok := n.d.entries[name]; ok {
		return nil, nil, 0, syscall.EEXIST
	}
	f := newFile(mode &^ syscall.S_IFMT)
	n.d.entries[name] = f
	f.attr(&out.Attr)
	return n.fs.inode(ctx, &n.Inode, f), nil, 0, 0
}

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if _, ok := n.d.entries[name]; ok {
		return nil, syscall.EEXIST
	}
	d := newDir(mode &^ syscall.S_IFMT)
	n.d.entries[name] = d
	out.Mode = syscall.S_IFDIR | d.mode
	return n.fs.inode(ctx, &n.Inode, d), 0
}

func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	switch n.d.entries[name].(type) {
	case nil:
		return syscall.ENOENT
	case *dir:
		return syscall.EISDIR
	}
	delete(n.d.entries, name)
	return 0
}

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	d, ok := n.d.entries[name].(*dir)
	switch {
	case n.d.entries[name] == nil:
		return syscall.ENOENT
	case !ok:
		return syscall.ENOTDIR
	case len(d.entries) > 0:
		return syscall.ENOTEMPTY
	}
	delete(n.d.entries, name)
	return 0
}

func (n *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.ENOTSUP
	}
	to, ok := newParent.(*dirNode)
	if !ok {
		return syscall.EXDEV
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	e := n.d.entries[name]
	if e == nil {
		return syscall.ENOENT
	}
	if old, ok := to.d.entries[newName].(*dir); ok && len(old.entries) > 0 {
		return syscall.ENOTEMPTY
	}
	delete(n.d.entries, name)
	to.d.entries[newName] = e
	return 0
}

// Fsync of a directory: the namespace is durable already.
func (n *dirNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno { return 0 }

func (n *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize, out.Frsize, out.NameLen = pageSize, pageSize, 255
	out.Blocks, out.Bfree, out.Bavail = 1<<24, 1<<23, 1<<23
	out.Files, out.Ffree = 1<<20, 1<<19
	return 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		n.f.truncate(0)
	}
	return nil, 0, 0
}

func (n *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return fuse.ReadResultData(dest[:n.f.read(dest, off)]), 0
}

func (n *fileNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n.f.write(data, off)
	return uint32(len(data)), 0
}

// Fsync serves fsync and fdatasync alike: both make the file durable.
func (n *fileNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	n.f.sync()
	n.fs.mu.Lock()
	n.fs.syncs++
	n.fs.mu.Unlock()
	return 0
}

// Flush (close) makes nothing durable.
func (n *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.f.attr(&out.Attr)
	return 0
}

func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		n.f.truncate(int64(size))
	}
	if mode, ok := in.GetMode(); ok {
		n.f.mu.Lock()
		n.f.mode = mode &^ syscall.S_IFMT
		n.f.mu.Unlock()
	}
	n.f.attr(&out.Attr)
	return 0
}
