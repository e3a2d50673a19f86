//go:build linux

package sqlite

// The writer's WAL writes, gathered (ADR-018). SQLite writes a WAL frame
// with two pwrite calls, its 24-byte header and then its page: a create of
// 1 KiB writes about 3.5 frames. Gathered, a create at one to eight clients
// costs the server 15-21% less CPU. The writer's connection opens its files
// through walVFS, the unix VFS with the WAL file's writes kept in a buffer
// that reaches the file in writes of up to maxWrite bytes, before anything
// could need it there:
//
//   - before the WAL is synced, which is where a commit becomes durable;
//   - before the wal-index header names the new frames (xShmBarrier on the
//     database file, which SQLite calls between the header's two copies),
//     so another connection never reads a frame that is not in the file
//     yet (below synchronous=FULL, only while the writes succeed: see
//     dbShmBarrier);
//   - before any read, truncate, size, file control or close of the WAL.
//
// An error from a gathered write surfaces from the call that flushed it,
// with the code the write would have had (SQLITE_FULL, SQLITE_IOERR_WRITE),
// and the buffer keeps every byte until a flush succeeds (or the WAL is
// closed): SQLite was told those writes were done, and may rely on them (a
// page spilled to the WAL in the middle of a transaction is read back from
// there).
//
// The methods are Go functions in SQLite's method tables, the way
// modernc.org/sqlite/vfs wires its own: the tables and the VFS are Go
// values that live as long as the process.

import (
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	lib "modernc.org/sqlite/lib"
)

const walVFSName = "quantykube-wal"

// walVFSVerified are the versions of the modules whose translated VFS
// tables walVFS patches that the power-cut suite (make chaos, with and
// without --sqlite-plain-wal) last passed with. TestWALVFSVerified fails
// when go.mod names others: run that suite, then update them here.
var walVFSVerified = map[string]string{
	"modernc.org/sqlite": "v1.62.0",
	"modernc.org/libc":   "v1.80.1",
}

// walBufSize holds 254 frames of 4,120 bytes: a batch of 64 creates of 1
// KiB writes about 220; a larger one flushes as it goes.
const walBufSize = 1 << 20

// maxWrite is the most one write to the file may carry. The unix VFS cuts
// a write's length to 17 bits (seekAndWriteFd's nBuf &= 0x1ffff) and
// reports what it did not write as a full disk.
const maxWrite = 124 << 10

var (
	registerOnce sync.Once
	registerErr  error
	walVFS       lib.Tsqlite3_vfs
	unixVFS      uintptr

	mu       sync.Mutex
	walFiles = map[uintptr]*walFile{}
	dbFiles  = map[uintptr]*dbFile{}
	walsOf   = map[string]map[*walFile]bool{} // by database path
	wrappers = map[wrapperKey]*lib.Tsqlite3_io_methods{}

	// For tests: SQLite's writes to the WAL, and the writes that reached it.
	walWrites, walFileWrites atomic.Int64

	// fileWrite writes to the WAL file (a variable for tests' faults).
	fileWrite = func(tls *libc.TLS, w *walFile, p uintptr, n int32, off int64) int32 {
		return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&w.orig.FxWrite)))(tls, w.pFile, p, n, off)
	}
)

// walFile is a WAL opened through walVFS. SQLite uses a file from one
// connection at a time; mu is for xShmBarrier, which reaches it through
// the database file.
type walFile struct {
	pFile uintptr
	orig  *lib.Tsqlite3_io_methods
	db    string

	mu  sync.Mutex
	buf uintptr // C memory, walBufSize bytes
	off int64   // the file offset of buf's first byte
	n   int     // bytes in buf
}

type dbFile struct {
	orig *lib.Tsqlite3_io_methods
	path string
}

// gatheringVFS registers walVFS once and returns its name, for the writer's
// DSN (vfs=).
func gatheringVFS() (string, error) {
	registerOnce.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		unix, err := libc.CString("unix")
		if err != nil {
			registerErr = err
			return
		}
		defer libc.Xfree(tls, unix)
		if unixVFS = lib.Xsqlite3_vfs_find(tls, unix); unixVFS == 0 {
			registerErr = errString("sqlite: the unix VFS is not registered")
			return
		}
		walVFS = *(*lib.Tsqlite3_vfs)(ptr(unixVFS))
		// Never freed: SQLite keeps the name as long as the VFS.
		if walVFS.FzName, err = libc.CString(walVFSName); err != nil {
			registerErr = err
			return
		}
		walVFS.FpNext = 0
		*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&walVFS.FxOpen)) = vfsOpen
		if rc := lib.Xsqlite3_vfs_register(tls, uintptr(unsafe.Pointer(&walVFS)), 0); rc != lib.SQLITE_OK {
			registerErr = errString("sqlite: register the WAL-gathering VFS: " + libc.GoString(lib.Xsqlite3_errstr(tls, rc)))
		}
	})
	return walVFSName, registerErr
}

type errString string

func (e errString) Error() string { return string(e) }

// ptr turns an address in C memory into a pointer without the conversion
// vet reports: the memory is not Go's, and does not move.
func ptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

func bytesAt(p uintptr, n int) []byte { return unsafe.Slice((*byte)(ptr(p)), n) }

type wrapperKey struct {
	orig uintptr
	wal  bool
}

// wrapper returns a copy of the method table at orig with set's methods,
// one per table and kind of file.
func wrapper(orig uintptr, wal bool, set func(*lib.Tsqlite3_io_methods)) *lib.Tsqlite3_io_methods {
	key := wrapperKey{orig, wal}
	if m := wrappers[key]; m != nil {
		return m
	}
	m := new(lib.Tsqlite3_io_methods)
	*m = *(*lib.Tsqlite3_io_methods)(ptr(orig))
	set(m)
	wrappers[key] = m
	return m
}

func vfsOpen(tls *libc.TLS, _, zName, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	unix := (*lib.Tsqlite3_vfs)(ptr(unixVFS))
	rc := (*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&unix.FxOpen)))(tls, unixVFS, zName, pFile, flags, pOutFlags)
	if rc != lib.SQLITE_OK || zName == 0 {
		return rc
	}
	f := (*lib.Tsqlite3_file)(ptr(pFile))
	orig := f.FpMethods
	if orig == 0 {
		return rc
	}
	name := libc.GoString(zName)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case flags&lib.SQLITE_OPEN_WAL != 0:
		w := &walFile{pFile: pFile, orig: (*lib.Tsqlite3_io_methods)(ptr(orig)), db: strings.TrimSuffix(name, "-wal")}
		if w.buf = libc.Xmalloc(tls, walBufSize); w.buf == 0 {
			return rc // no buffer: the WAL is written as SQLite writes it
		}
		walFiles[pFile] = w
		if walsOf[w.db] == nil {
			walsOf[w.db] = map[*walFile]bool{}
		}
		walsOf[w.db][w] = true
		f.FpMethods = uintptr(unsafe.Pointer(wrapper(orig, true, func(m *lib.Tsqlite3_io_methods) {
			*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&m.FxClose)) = walClose
			*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxRead)) = walRead
			*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&m.FxWrite)) = walWrite
			*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&m.FxTruncate)) = walTruncate
			*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&m.FxSync)) = walSync
			*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&m.FxFileSize)) = walFileSize
			*(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&m.FxFileControl)) = walFileControl
		})))
	case flags&lib.SQLITE_OPEN_MAIN_DB != 0:
		om := (*lib.Tsqlite3_io_methods)(ptr(orig))
		if om.FiVersion < 2 || om.FxShmBarrier == 0 {
			return rc
		}
		dbFiles[pFile] = &dbFile{orig: om, path: name}
		f.FpMethods = uintptr(unsafe.Pointer(wrapper(orig, false, func(m *lib.Tsqlite3_io_methods) {
			*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&m.FxClose)) = dbClose
			*(*func(*libc.TLS, uintptr))(unsafe.Pointer(&m.FxShmBarrier)) = dbShmBarrier
		})))
	}
	return rc
}

func wal(pFile uintptr) *walFile {
	mu.Lock()
	w := walFiles[pFile]
	mu.Unlock()
	return w
}

// flush writes buf to the file. On an error it keeps buf whole, and the
// next flush writes it all again.
func (w *walFile) flush(tls *libc.TLS) int32 {
	if rc := w.write(tls, w.buf, w.n, w.off); rc != lib.SQLITE_OK {
		return rc
	}
	w.n = 0
	return lib.SQLITE_OK
}

// write writes n bytes at p to the file at off, in writes of up to
// maxWrite.
func (w *walFile) write(tls *libc.TLS, p uintptr, n int, off int64) int32 {
	for done := 0; done < n; {
		chunk := min(n-done, maxWrite)
		walFileWrites.Add(1)
		if rc := fileWrite(tls, w, p+uintptr(done), int32(chunk), off+int64(done)); rc != lib.SQLITE_OK {
			return rc
		}
		done += chunk
	}
	return lib.SQLITE_OK
}

func walWrite(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	w := wal(pFile)
	w.mu.Lock()
	defer w.mu.Unlock()
	walWrites.Add(1)
	n := int(iAmt)
	switch end := w.off + int64(w.n); {
	case w.n > 0 && iOfst == end && w.n+n <= walBufSize:
		// The usual case: the next frame, or the page after its header.
	case w.n > 0 && iOfst >= w.off && iOfst+int64(n) <= end:
		// A frame rewritten in the same transaction, still in buf.
		copy(bytesAt(w.buf+uintptr(iOfst-w.off), n), bytesAt(zBuf, n))
		return lib.SQLITE_OK
	default:
		if rc := w.flush(tls); rc != lib.SQLITE_OK {
			return rc
		}
		if n > walBufSize { // larger than any frame: not expected
			return w.write(tls, zBuf, n, iOfst)
		}
		w.off = iOfst
	}
	copy(bytesAt(w.buf+uintptr(w.n), n), bytesAt(zBuf, n))
	w.n += n
	return lib.SQLITE_OK
}

// flushed flushes the WAL at pFile and, if that succeeded, calls its own
// method.
func flushed(tls *libc.TLS, pFile uintptr, method func(orig *lib.Tsqlite3_io_methods) int32) int32 {
	w := wal(pFile)
	w.mu.Lock()
	defer w.mu.Unlock()
	if rc := w.flush(tls); rc != lib.SQLITE_OK {
		return rc
	}
	return method(w.orig)
}

func walSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	return flushed(tls, pFile, func(orig *lib.Tsqlite3_io_methods) int32 {
		return (*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&orig.FxSync)))(tls, pFile, flags)
	})
}

func walRead(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	return flushed(tls, pFile, func(orig *lib.Tsqlite3_io_methods) int32 {
		return (*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&orig.FxRead)))(tls, pFile, zBuf, iAmt, iOfst)
	})
}

func walTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	return flushed(tls, pFile, func(orig *lib.Tsqlite3_io_methods) int32 {
		return (*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&orig.FxTruncate)))(tls, pFile, size)
	})
}

func walFileSize(tls *libc.TLS, pFile, pSize uintptr) int32 {
	return flushed(tls, pFile, func(orig *lib.Tsqlite3_io_methods) int32 {
		return (*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&orig.FxFileSize)))(tls, pFile, pSize)
	})
}

// walFileControl flushes first: a size hint or chunk size acts on the
// file's length, which the buffer's frames may extend.
func walFileControl(tls *libc.TLS, pFile uintptr, op int32, pArg uintptr) int32 {
	return flushed(tls, pFile, func(orig *lib.Tsqlite3_io_methods) int32 {
		return (*(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&orig.FxFileControl)))(tls, pFile, op, pArg)
	})
}

func walClose(tls *libc.TLS, pFile uintptr) int32 {
	w := wal(pFile)
	w.mu.Lock()
	rc := w.flush(tls)
	libc.Xfree(tls, w.buf)
	w.buf = 0
	w.mu.Unlock()
	mu.Lock()
	delete(walFiles, pFile)
	delete(walsOf[w.db], w)
	if len(walsOf[w.db]) == 0 {
		delete(walsOf, w.db)
	}
	mu.Unlock()
	(*lib.Tsqlite3_file)(ptr(pFile)).FpMethods = uintptr(unsafe.Pointer(w.orig))
	if rc2 := (*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&w.orig.FxClose)))(tls, pFile); rc == lib.SQLITE_OK {
		rc = rc2
	}
	return rc
}

// dbShmBarrier writes every gathered frame of the database's WAL before
// the barrier: SQLite calls it between writing the wal-index header's two
// copies, and a reader trusts the header only once both agree. With
// synchronous=FULL the commit's sync has emptied the buffer by then. Below
// FULL a write that fails here cannot be reported (xShmBarrier returns
// nothing) and the header is published all the same: the frames stay in
// the buffer and the WAL's next call writes them or reports the error, but
// until then a reader or checkpoint finds them missing. QuantyKube only
// runs FULL (ADR-018).
func dbShmBarrier(tls *libc.TLS, pFile uintptr) {
	mu.Lock()
	db := dbFiles[pFile]
	var wals []*walFile
	for w := range walsOf[db.path] {
		wals = append(wals, w)
	}
	mu.Unlock()
	for _, w := range wals {
		w.mu.Lock()
		if w.buf != 0 {
			w.flush(tls)
		}
		w.mu.Unlock()
	}
	(*(*func(*libc.TLS, uintptr))(unsafe.Pointer(&db.orig.FxShmBarrier)))(tls, pFile)
}

func dbClose(tls *libc.TLS, pFile uintptr) int32 {
	mu.Lock()
	db := dbFiles[pFile]
	delete(dbFiles, pFile)
	mu.Unlock()
	(*lib.Tsqlite3_file)(ptr(pFile)).FpMethods = uintptr(unsafe.Pointer(db.orig))
	return (*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&db.orig.FxClose)))(tls, pFile)
}
