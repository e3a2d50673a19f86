package main

import (
	"archive/tar"
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, b []byte) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{h, data})
	}
}

// A layer lists its entries in byte order whatever order they were added
// in, makes their missing parents, and carries no time but the build's
// and no owner but the entries'.
func TestLayerTarIsCanonical(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	data := dir("var/lib/q", 0o700)
	data.uid, data.gid = 65532, 65532
	entries := []entry{
		file("usr/share/zoneinfo/UTC", 0o644, []byte("TZif")),
		symlink("usr/share/zoneinfo/Zulu", "UTC"),
		data,
		file("/etc/passwd", 0o644, []byte("root:x:0:0::/:/x\n")),
		dir("tmp/", 0o1777),
	}
	var tars [][]byte
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}} {
		tr := tree{}
		for _, i := range order {
			if err := tr.add(entries[i]); err != nil {
				t.Fatal(err)
			}
		}
		b, err := tr.layerTar(mtime.Add(300 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		tars = append(tars, b)
	}
	for i := 1; i < len(tars); i++ {
		if !bytes.Equal(tars[0], tars[i]) {
			t.Fatalf("adding the entries in another order changed the layer's bytes")
		}
	}
	var names []string
	for _, e := range readTar(t, tars[0]) {
		names = append(names, e.hdr.Name)
		if !e.hdr.ModTime.Equal(mtime) {
			t.Errorf("%s: time %s, want the build's %s (whole seconds)", e.hdr.Name, e.hdr.ModTime, mtime)
		}
		if e.hdr.Uname != "" || e.hdr.Gname != "" {
			t.Errorf("%s: owner names %q:%q, want numeric owners only", e.hdr.Name, e.hdr.Uname, e.hdr.Gname)
		}
		switch e.hdr.Name {
		case "var/lib/q/":
			if e.hdr.Uid != 65532 || e.hdr.Gid != 65532 || e.hdr.Mode != 0o700 {
				t.Errorf("the data directory: %d:%d %#o, want 65532:65532 0700", e.hdr.Uid, e.hdr.Gid, e.hdr.Mode)
			}
		case "tmp/":
			if e.hdr.Mode != 0o1777 {
				t.Errorf("tmp: mode %#o, want 01777", e.hdr.Mode)
			}
		case "usr/share/zoneinfo/Zulu":
			if e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != "UTC" {
				t.Errorf("Zulu: %+v, want a symbolic link to UTC", e.hdr)
			}
		default:
			if e.hdr.Uid != 0 || e.hdr.Gid != 0 {
				t.Errorf("%s: owner %d:%d, want root", e.hdr.Name, e.hdr.Uid, e.hdr.Gid)
			}
		}
	}
	want := []string{"etc/", "etc/passwd", "tmp/", "usr/", "usr/share/", "usr/share/zoneinfo/", "usr/share/zoneinfo/UTC", "usr/share/zoneinfo/Zulu", "var/", "var/lib/", "var/lib/q/"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
}

func TestLayerRejectsBadEntries(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"escapes the root", []entry{file("../etc/passwd", 0o644, nil)}, "not a path inside"},
		{"the root itself", []entry{dir("/", 0o755)}, "not a path inside"},
		{"a file as a directory", []entry{file("etc", 0o644, nil), file("etc/passwd", 0o644, nil)}, "is not a directory"},
		{"a device", []entry{{name: "dev/null", typ: tar.TypeChar}}, "neither a file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := tree{}
			err := tr.add(c.entries...)
			if err == nil {
				_, err = tr.layerTar(time.Unix(0, 0))
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}
