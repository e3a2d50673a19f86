package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entry is one file, directory or symbolic link of a layer. Names are
// relative to the root, without a leading or trailing slash.
type entry struct {
	name     string
	typ      byte  // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	mode     int64 // permission bits (and sticky)
	uid, gid int
	data     []byte // a regular file's content
	link     string // a symbolic link's target
}

func file(name string, mode int64, data []byte) entry {
	return entry{name: name, typ: tar.TypeReg, mode: mode, data: data}
}

func dir(name string, mode int64) entry { return entry{name: name, typ: tar.TypeDir, mode: mode} }

func symlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeSymlink, mode: 0o777, link: target}
}

// tree is the content of one layer, keyed by name so that a later entry
// replaces an earlier one of the same name.
type tree map[string]entry

func (t tree) add(es ...entry) error {
	for _, e := range es {
		n := path.Clean(strings.Trim(e.name, "/"))
		if n == "." || n == ".." || strings.HasPrefix(n, "../") {
			return fmt.Errorf("layer entry %q: not a path inside the image", e.name)
		}
		e.name = n
		t[n] = e
	}
	return nil
}

// layerTar is the layer as an uncompressed tar: every entry in byte order
// of its name (so every directory before what it holds), each missing
// parent directory added as root's 0755, every time the build's
// (SOURCE_DATE_EPOCH), numeric owners without names. Nothing of the
// machine that builds it (its clock, its users, the order its file system
// lists a directory in) reaches the bytes, so one input gives one digest.
func (t tree) layerTar(mtime time.Time) ([]byte, error) {
	all := tree{}
	for n, e := range t {
		all[n] = e
		for p := path.Dir(n); p != "."; p = path.Dir(p) {
			if _, ok := t[p]; !ok {
				all[p] = dir(p, 0o755)
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for p := path.Dir(n); p != "."; p = path.Dir(p) {
			if all[p].typ != tar.TypeDir {
				return nil, fmt.Errorf("layer entry %q: its parent %q is not a directory", n, p)
			}
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, n := range names {
		e := all[n]
		h := &tar.Header{
			Typeflag: e.typ,
			Name:     n,
			Mode:     e.mode,
			Uid:      e.uid,
			Gid:      e.gid,
			ModTime:  mtime,
			Format:   tar.FormatPAX,
		}
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(e.data))
		case tar.TypeSymlink:
			h.Linkname = e.link
		default:
			return nil, fmt.Errorf("layer entry %q: type %q is neither a file, a directory nor a symbolic link", n, e.typ)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %q: %w", n, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer entry %q: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layer is the tree as an OCI layer, gzip-compressed by go-containerregistry
// (Go's compress/gzip, which writes no time or name into its header).
func (t tree) layer(mtime time.Time) (v1.Layer, error) {
	b, err := t.layerTar(mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
