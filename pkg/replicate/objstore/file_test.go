package objstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

func TestFile(t *testing.T) {
	runSuite(t, backend{name: "file", url: fileURL})
}

func fileURL(t *testing.T) string { return "file://" + t.TempDir() }

// A failed Put leaves no temporary file behind, and a returned one leaves
// only the object.
func TestFileLeavesNoTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	st, err := objstore.Open(context.Background(), "file://"+dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Put(ctx, "segments/x", strings.NewReader("12345"), 10); err == nil {
		t.Fatal("short Put: no error")
	}
	put(t, st, "segments/y", "y", 1)
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return err
	})
	if !equal(files, []string{"segments/y"}) {
		t.Errorf("files under the store: %v, want only segments/y", files)
	}
	fi, err := os.Stat(filepath.Join(dir, "segments/y"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("object mode %v, want 0600: the store holds every Secret", fi.Mode().Perm())
	}
}

func TestFileErrorsNameThePath(t *testing.T) {
	dir := t.TempDir()
	st, err := objstore.Open(context.Background(), "file://"+dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.String(), "file://"+dir; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	_, err = st.Get(context.Background(), "segments/absent")
	if !errors.Is(err, objstore.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "segments/absent")) {
		t.Errorf("Get of an absent object: %v: want ErrNotExist naming its path", err)
	}
	// A file where a directory must be.
	put(t, st, "f", "f", 1)
	err = st.Put(context.Background(), "f/x", strings.NewReader("x"), 1)
	if err == nil || !strings.Contains(err.Error(), "f/x") || !strings.Contains(err.Error(), dir) {
		t.Errorf("Put under a file: %v: want an error naming the object and the store", err)
	}
}

func TestOpenRefusesBadURLs(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url  string
		opts objstore.Options
		want string
	}{
		{"", objstore.Options{}, "no scheme"},
		{"/tmp/x", objstore.Options{}, "no scheme"},
		{"gs://bucket", objstore.Options{}, `scheme "gs" not supported`},
		{"file://relative/path", objstore.Options{}, "not host"},
		{"file:relative", objstore.Options{}, "absolute path"},
		{"file://" + dir + "?x=1", objstore.Options{}, "no query"},
		{"file://" + notDir, objstore.Options{}, "not a directory"},
		{"file://" + dir, objstore.Options{CAFile: "/ca.pem"}, "s3:// only"},
		{"s3://AKIAEXAMPLE:supersecret@bucket/prefix", objstore.Options{}, "never the URL"},
		{"s3://bucket/%zz", objstore.Options{}, "object store URL"},
	} {
		_, err := objstore.Open(context.Background(), tc.url, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v, want an error saying %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "supersecret") {
			t.Errorf("Open(%q): %v: repeats the secret", tc.url, err)
		}
	}
}
