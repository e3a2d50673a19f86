package objstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore/objstoretest"
)

func TestOpenS3RefusesBadURLs(t *testing.T) {
	objstoretest.Isolate(t)
	for _, tc := range []struct{ url, want string }{
		{"s3:///prefix", "no bucket"},
		{"s3://b/p?bogus=1", `unknown parameter "bogus"`},
		{"s3://b/p?endpoint=ftp://x", "endpoint"},
		{"s3://b/p?endpoint=http://u:secretpw@x", "endpoint"},
		{"s3://b/p?force-path-style=maybe", "force-path-style"},
		{"s3://b/p?skip-verify=perhaps", "skip-verify"},
		{"s3://b/p?region=a&region=b", "2 times"},
		{"s3://b/p?ca-file=/nonexistent/ca.pem", "CA file"},
		{"s3://b/a/../b", "prefix"},
	} {
		_, err := objstore.Open(context.Background(), tc.url, objstore.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q): %v, want an error saying %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("Open(%q): %v: repeats the password", tc.url, err)
		}
	}
	_, err := objstore.Open(context.Background(), "s3://b/p?ca-file=/a.pem", objstore.Options{CAFile: "/b.pem"})
	if err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("Open with two CA files: %v", err)
	}
	st, err := objstore.Open(context.Background(), "s3://b/some/prefix/?endpoint=127.0.0.1:9&region=eu-west-3", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.String(), "s3://b/some/prefix/?endpoint=127.0.0.1:9&region=eu-west-3"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
