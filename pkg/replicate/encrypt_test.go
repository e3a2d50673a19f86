package replicate_test

import (
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate"
	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// With objects encrypted on this side, a replicated store restores at its
// latest and at an earlier revision; the same bucket read without the key
// is refused and nothing is written.
func TestReplicateEncrypted(t *testing.T) {
	replicateEncrypted(t, "file://"+filepath.Join(t.TempDir(), "bucket"))
}

func replicateEncrypted(t *testing.T, url string) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte(hex.EncodeToString([]byte(rand.Text() + rand.Text())[:32])), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(t.Context(), url, objstore.Options{EncryptionKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.db")
	_, c := serve(t, path)
	rng := mrand.New(mrand.NewPCG(13, 14))
	r := startReplicator(t, path, st)
	revs := workload(t, c, rng, 100)
	waitShipped(t, r, revs[len(revs)-1])
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, rev := range []int64{revs[len(revs)-1], revs[rng.IntN(len(revs))]} {
		rc, info := restored(t, st, replicate.Target{Rev: rev})
		_, want := state(t, c, rev)
		if got, s := state(t, rc, 0); got != rev || s != want || info.Target != rev {
			t.Fatalf("restored at %d: revision %d, state\n%s\nwant\n%s", rev, got, s, want)
		}
	}
	plain, err := objstore.Open(t.Context(), url, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "x.db")
	if _, err := replicate.Restore(t.Context(), plain, dialect(t, out), replicate.Target{}, false); err == nil || !strings.Contains(err.Error(), "is encrypted") {
		t.Fatalf("restore of encrypted objects without the key: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("%s written by a failed restore", out)
	}
}
