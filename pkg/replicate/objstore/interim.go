// Package objstore is an interim copy of h-objstore's interface with a
// file:// backend, so pkg/replicate builds and tests before that branch
// lands. Deleted at the merge.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrNotExist is wrapped by Get's error for an absent object.
var ErrNotExist = errors.New("object does not exist")

// Object is one listed object.
type Object struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// Store is a flat namespace of objects under one URL's prefix.
type Store interface {
	Put(ctx context.Context, name string, r io.Reader, size int64) error
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	List(ctx context.Context, prefix string) ([]Object, error)
	Delete(ctx context.Context, name string) error
	String() string
}

// Options are Open's options.
type Options struct {
	CAFile            string
	EncryptionKeyFile string
}

// Open opens a file:// URL.
func Open(_ context.Context, rawURL string, _ Options) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "file" || u.Path == "" {
		return nil, fmt.Errorf("object store %q: want file:///PATH", rawURL)
	}
	if err := os.MkdirAll(u.Path, 0o700); err != nil {
		return nil, err
	}
	return fileStore(u.Path), nil
}

type fileStore string

func (f fileStore) String() string { return "file://" + string(f) }

func (f fileStore) Put(_ context.Context, name string, r io.Reader, _ int64) error {
	p := filepath.Join(string(f), filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	t, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return err
	}
	defer os.Remove(t.Name())
	if _, err := io.Copy(t, r); err != nil {
		t.Close()
		return err
	}
	if err := t.Close(); err != nil {
		return err
	}
	return os.Rename(t.Name(), p)
}

func (f fileStore) Get(_ context.Context, name string) (io.ReadCloser, error) {
	r, err := os.Open(filepath.Join(string(f), filepath.FromSlash(name)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", name, ErrNotExist)
	}
	return r, err
}

func (f fileStore) List(_ context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := filepath.WalkDir(string(f), func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || strings.HasPrefix(e.Name(), ".put-") {
			return err
		}
		rel, _ := filepath.Rel(string(f), p)
		rel = filepath.ToSlash(rel)
		if !strings.HasPrefix(rel, prefix) {
			return nil
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		out = append(out, Object{Name: rel, Size: st.Size(), ModTime: st.ModTime()})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

func (f fileStore) Delete(_ context.Context, name string) error {
	err := os.Remove(filepath.Join(string(f), filepath.FromSlash(name)))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
