//go:build seaweedfs

// The s3:// backend against a real SeaweedFS: make replicate-s3 runs
// these (the seaweedfs build tag), once scripts/seaweedfs.sh has built it.

package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore/objstoretest"
)

// prefixURL gives each test a prefix of its own in the server's bucket.
func prefixURL(s *objstoretest.Server) func(t *testing.T) string {
	return func(t *testing.T) string {
		return s.URL(regexp.MustCompile(`[^A-Za-z0-9-]+`).ReplaceAllString(t.Name(), "-"))
	}
}

// TestS3 runs the suite on a real SeaweedFS, signed with the credentials
// the environment gives, and checks what only S3 has: anonymous requests,
// shared credential files, refused credentials, a server gone and back.
func TestS3(t *testing.T) {
	srv := objstoretest.Start(t)
	objstoretest.SetCredentials(t)
	runSuite(t, backend{name: "s3", url: prefixURL(srv)})

	t.Run("Anonymous", func(t *testing.T) {
		objstoretest.Isolate(t)
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		os.Unsetenv("AWS_ACCESS_KEY_ID")
		st := backend{url: prefixURL(srv)}.open(t)
		put(t, st, "bases/anonymous", "no credentials", -1)
		if got := get(t, st, "bases/anonymous"); got != "no credentials" {
			t.Errorf("Get = %q", got)
		}
	})
	t.Run("SharedCredentialsFile", func(t *testing.T) {
		objstoretest.Isolate(t)
		t.Setenv("AWS_ACCESS_KEY_ID", "")
		os.Unsetenv("AWS_ACCESS_KEY_ID")
		creds := filepath.Join(t.TempDir(), "credentials")
		body := fmt.Sprintf("[default]\naws_access_key_id = WRONG\naws_secret_access_key = wrong\n\n[quanty]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
			objstoretest.AccessKey, objstoretest.SecretKey)
		if err := os.WriteFile(creds, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
		t.Setenv("AWS_PROFILE", "quanty")
		st := backend{url: prefixURL(srv)}.open(t)
		put(t, st, "bases/profile", "from the profile", -1)
		// The default profile's key is refused: the profile was what signed.
		t.Setenv("AWS_PROFILE", "default")
		st = backend{url: prefixURL(srv)}.open(t)
		err := st.Put(context.Background(), "bases/default", strings.NewReader("x"), 1)
		if err == nil {
			t.Fatal("Put signed with an unknown key: no error")
		}
		if !strings.Contains(err.Error(), "bases/default") {
			t.Errorf("refused Put: %v: does not name the object", err)
		}
	})
	t.Run("WrongSecret", func(t *testing.T) {
		objstoretest.SetCredentials(t)
		t.Setenv("AWS_SECRET_ACCESS_KEY", "the-wrong-secret-never-printed")
		st := backend{url: prefixURL(srv)}.open(t)
		for _, err := range []error{
			st.Put(context.Background(), "bases/x", strings.NewReader("x"), 1),
			func() error { _, err := st.List(context.Background(), ""); return err }(),
		} {
			if err == nil {
				t.Fatal("request signed with a wrong secret: no error")
			}
			if strings.Contains(err.Error(), "the-wrong-secret-never-printed") || strings.Contains(err.Error(), objstoretest.SecretKey) {
				t.Errorf("error repeats a secret: %v", err)
			}
			if !strings.Contains(err.Error(), srv.Endpoint()) {
				t.Errorf("error does not name the store: %v", err)
			}
		}
	})
	t.Run("NoSuchBucket", func(t *testing.T) {
		u := strings.Replace(srv.URL("x"), objstoretest.Bucket, "no-such-bucket-here", 1)
		st, err := objstore.Open(context.Background(), u, objstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Get(context.Background(), "bases/x")
		if err == nil || errors.Is(err, objstore.ErrNotExist) {
			t.Errorf("Get in an absent bucket: %v, want an error other than ErrNotExist", err)
		}
	})
	// Last: it stops the server.
	t.Run("ServerGoneAndBack", func(t *testing.T) {
		st := backend{url: prefixURL(srv)}.open(t)
		put(t, st, "bases/before", "before", -1)
		srv.Stop()
		ctx := context.Background()
		err := st.Put(ctx, "bases/during", strings.NewReader("during"), -1)
		if err == nil || !strings.Contains(err.Error(), "bases/during") || !strings.Contains(err.Error(), srv.Endpoint()) {
			t.Errorf("Put with the server stopped: %v: want an error naming the object and the store", err)
		}
		if _, err := st.Get(ctx, "bases/before"); err == nil || errors.Is(err, objstore.ErrNotExist) {
			t.Errorf("Get with the server stopped: %v: want an error, not ErrNotExist", err)
		}
		if _, err := st.List(ctx, ""); err == nil {
			t.Error("List with the server stopped: no error")
		}
		srv.Restart()
		put(t, st, "bases/after", "after", -1)
		if got := get(t, st, "bases/before"); got != "before" {
			t.Errorf("Get after the restart = %q", got)
		}
		if got := names(t, st, "bases/"); !equal(got, []string{"bases/after", "bases/before"}) {
			t.Errorf("List after the restart = %v", got)
		}
	})
}
