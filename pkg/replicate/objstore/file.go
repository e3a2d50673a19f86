package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// fileStore keeps each object as a file under root, its name's slashes as
// directories. A Put is a temporary file beside the target, fsynced,
// renamed over it, and the directory fsynced: a crash leaves the old
// object or the new one, never a part, and a returned Put survives a power
// cut. Temporary files begin with ".", which no object name may, so a
// listing never shows one.
type fileStore struct {
	root string
}

// tmpPrefix begins the name of a Put's temporary file.
const tmpPrefix = ".put-"

// openFile opens file:///path (or file://localhost/path), creating the
// directory, 0700 since the store holds every Secret of the cluster.
func openFile(u *url.URL) (Store, error) {
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("object store URL %s: a file:// URL names a local path (file:///path), not host %q", redacted(u), u.Host)
	}
	if u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return nil, fmt.Errorf("object store URL %s: want an absolute path, file:///path", redacted(u))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("object store URL %s: a file:// URL takes no query or fragment", redacted(u))
	}
	root := filepath.Clean(u.Path)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("object store %s: %w", fileURL(root), err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", fileURL(root), err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("object store %s: %s is not a directory", fileURL(root), root)
	}
	return &fileStore{root: root}, nil
}

func fileURL(root string) string { return (&url.URL{Scheme: "file", Path: root}).String() }

func (s *fileStore) String() string { return fileURL(s.root) }

func (s *fileStore) path(name string) string { return filepath.Join(s.root, filepath.FromSlash(name)) }

func (s *fileStore) errorf(name string, err error) error {
	return fmt.Errorf("%s: object %s: %w", s, name, err)
}

func (s *fileStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("%s: put: %w", s, err)
	}
	target := s.path(name)
	dir := filepath.Dir(target)
	if err := s.mkdirAll(dir); err != nil {
		return s.errorf(name, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return s.errorf(name, err)
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	n, err := io.Copy(f, ctxReader{ctx, r})
	if err != nil {
		return s.errorf(name, fmt.Errorf("write %s: %w", tmp, err))
	}
	if size >= 0 && n != size {
		return s.errorf(name, fmt.Errorf("read %d bytes, want %d", n, size))
	}
	if err := f.Sync(); err != nil {
		return s.errorf(name, fmt.Errorf("fsync %s: %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		return s.errorf(name, fmt.Errorf("close %s: %w", tmp, err))
	}
	if err := ctx.Err(); err != nil {
		return s.errorf(name, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		return s.errorf(name, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		return s.errorf(name, err)
	}
	return nil
}

// mkdirAll creates dir and its missing parents under root, fsyncing the
// parent of each one it creates so that the new entries are durable too.
func (s *fileStore) mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir && len(parent) >= len(s.root) {
		if err := s.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

func (s *fileStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("%s: get: %w", s, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, s.errorf(name, err)
	}
	p := s.path(name)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, s.errorf(name, fmt.Errorf("%s: %w", p, ErrNotExist))
	}
	if err != nil {
		return nil, s.errorf(name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, s.errorf(name, err)
	}
	if fi.IsDir() { // a prefix of other names, as on S3 not an object
		f.Close()
		return nil, s.errorf(name, fmt.Errorf("%s is a directory: %w", p, ErrNotExist))
	}
	return f, nil
}

func (s *fileStore) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	// Walk only the deepest directory the prefix names whole.
	start := s.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = s.path(prefix[:i])
	}
	var out []Object
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll // nothing under the prefix
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && p != start {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted since the directory was read
		}
		if err != nil {
			return err
		}
		out = append(out, Object{Name: name, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list %q: %w", s, prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *fileStore) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("%s: delete: %w", s, err)
	}
	if err := ctx.Err(); err != nil {
		return s.errorf(name, err)
	}
	p := s.path(name)
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return nil // a prefix of other names, not an object: nothing to delete
	}
	err := os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return s.errorf(name, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return s.errorf(name, err)
	}
	return nil
}
