package objstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// writeKey writes a key file (32 raw bytes from seed) for the rest of t.
func writeKey(t *testing.T, seed byte) string {
	t.Helper()
	key := make([]byte, 32)
	rand.NewChaCha8([32]byte{seed, 42}).Read(key)
	p := filepath.Join(t.TempDir(), fmt.Sprintf("key-%d", seed))
	if err := os.WriteFile(p, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func readAll(st objstore.Store, name string) ([]byte, error) {
	rc, err := st.Get(context.Background(), name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// testTampered writes encrypted objects, then changes their ciphertext
// through the same store opened without the key: every change is a clear
// error naming the object, never other plaintext.
func testTampered(t *testing.T, b backend) {
	ctx := context.Background()
	url := b.url(t)
	keyFile := writeKey(t, 1)
	open := func(key string) objstore.Store {
		st, err := objstore.Open(ctx, url, objstore.Options{EncryptionKeyFile: key, CAFile: b.opts.CAFile})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	enc, raw := open(keyFile), open("")
	// Three chunks and a bit: 64 KiB chunks.
	plain := make([]byte, 3*64<<10+100)
	rand.NewChaCha8([32]byte{7}).Read(plain)
	if err := enc.Put(ctx, "segments/a", bytes.NewReader(plain), int64(len(plain))); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(enc, "segments/a"); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Get: %d bytes, %v", len(got), err)
	}
	sealed, err := readAll(raw, "segments/a")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain[:64]) {
		t.Fatal("the stored object holds the plaintext")
	}
	const header, chunk = 45, 64<<10 + 16
	if want := header + len(plain) + 4*16; len(sealed) != want {
		t.Errorf("stored %d bytes, want %d", len(sealed), want)
	}
	objs, err := enc.List(ctx, "segments/a")
	if err != nil || len(objs) != 1 || objs[0].Size != int64(len(sealed)) {
		t.Errorf("List: %v, %v: want the stored size, %d", objs, err, len(sealed))
	}

	// check stores body as segments/a's ciphertext, or name's.
	check := func(what string, body []byte, want string, name ...string) {
		t.Helper()
		n := "segments/a"
		if len(name) > 0 {
			n = name[0]
		}
		if err := raw.Put(ctx, n, bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
		got, err := readAll(enc, n)
		switch {
		case err == nil:
			t.Errorf("%s: read %d bytes, no error", what, len(got))
		case !strings.Contains(err.Error(), n) || !strings.Contains(err.Error(), want):
			t.Errorf("%s: %v: want an error naming the object and saying %q", what, err, want)
		case errors.Is(err, objstore.ErrNotExist):
			t.Errorf("%s: %v wraps ErrNotExist", what, err)
		}
	}
	flip := func(at int) []byte {
		b := bytes.Clone(sealed)
		b[at] ^= 0x20
		return b
	}
	check("magic changed", flip(0), "not encrypted")
	check("version changed", flip(4), "version")
	check("key id changed", flip(6), "another key")
	check("salt changed", flip(header-1), "fails authentication")
	check("first chunk changed", flip(header+10), "chunk 0")
	check("third chunk's tag changed", flip(header+3*chunk-1), "chunk 2")
	check("last chunk changed", flip(len(sealed)-1), "chunk 3")
	check("cut in the header", sealed[:20], "shorter than the encryption header")
	check("cut after the header", sealed[:header], "truncated")
	check("cut inside a chunk", sealed[:header+chunk+500], "chunk 1")
	check("cut at a chunk's end", sealed[:header+2*chunk], "chunk 1")
	check("last byte cut", sealed[:len(sealed)-1], "chunk 3")
	check("data appended", append(bytes.Clone(sealed), 0), "chunk 3")
	check("a chunk dropped", append(bytes.Clone(sealed[:header+chunk]), sealed[header+2*chunk:]...), "chunk 1")
	check("chunks swapped", append(append(bytes.Clone(sealed[:header]), sealed[header+chunk:header+2*chunk]...), sealed[header+chunk:]...), "chunk 0")
	// Another object's ciphertext under this name: the name is authenticated.
	check("another object's", sealed, "chunk 0", "segments/b")
	check("plaintext", []byte(strings.Repeat("not encrypted at all ", 10)), "not encrypted")

	// Put back, the original ciphertext reads again: the errors above came
	// from the changes, not from the copying.
	if err := raw.Put(ctx, "segments/a", bytes.NewReader(sealed), -1); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(enc, "segments/a"); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("the original ciphertext put back: %d bytes, %v", len(got), err)
	}
	// A wrong key is said at Get, before any data.
	other := open(writeKey(t, 2))
	_, err = other.Get(ctx, "segments/a")
	if err == nil || !strings.Contains(err.Error(), "segments/a: encrypted with another key") {
		t.Errorf("Get with another key: %v", err)
	}
	// An absent object is ErrNotExist through encryption too.
	if _, err := enc.Get(ctx, "segments/absent"); !errors.Is(err, objstore.ErrNotExist) {
		t.Errorf("Get of an absent object: %v", err)
	}
	// Sizes at chunk boundaries round-trip, known or not.
	for _, n := range []int{0, 1, 64<<10 - 1, 64 << 10, 64<<10 + 1, 2 * 64 << 10} {
		for _, size := range []int64{int64(n), -1} {
			name := fmt.Sprintf("segments/size-%d-%d", n, size)
			if err := enc.Put(ctx, name, bytes.NewReader(plain[:n]), size); err != nil {
				t.Fatalf("Put of %d bytes, size %d: %v", n, size, err)
			}
			if got, err := readAll(enc, name); err != nil || !bytes.Equal(got, plain[:n]) {
				t.Errorf("Get of %d bytes, put with size %d: %d bytes, %v", n, size, len(got), err)
			}
		}
	}
}

func TestEncryptionKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := bytes.Repeat([]byte{0xab}, 32)
	for _, tc := range []struct {
		name string
		body []byte
		ok   bool
	}{
		{"raw", key, true},
		{"hex", []byte(hex.EncodeToString(key)), true},
		{"hex-newline", []byte(hex.EncodeToString(key) + "\n"), true},
		{"raw-newline", append(bytes.Clone(key), '\n'), false},
		{"short", key[:16], false},
		{"hex-short", []byte(hex.EncodeToString(key[:31])), false},
		{"not-hex", []byte(strings.Repeat("zz", 32)), false},
		{"empty", nil, false},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, tc.body, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := objstore.Open(context.Background(), "file://"+filepath.Join(dir, "store"), objstore.Options{EncryptionKeyFile: p})
		if tc.ok != (err == nil) {
			t.Errorf("key file %s: %v", tc.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "want 32 raw bytes or 64 hexadecimal characters") {
			t.Errorf("key file %s: %v: does not say what a key file holds", tc.name, err)
		}
		if tc.ok && !strings.HasSuffix(st.String(), " (encrypted)") {
			t.Errorf("String() = %q", st.String())
		}
	}
	// The raw and the hexadecimal form are the same key.
	ctx := context.Background()
	url := "file://" + filepath.Join(dir, "store")
	raw, _ := objstore.Open(ctx, url, objstore.Options{EncryptionKeyFile: filepath.Join(dir, "raw")})
	hx, _ := objstore.Open(ctx, url, objstore.Options{EncryptionKeyFile: filepath.Join(dir, "hex-newline")})
	if err := raw.Put(ctx, "a", strings.NewReader("same key"), -1); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(hx, "a"); err != nil || string(got) != "same key" {
		t.Errorf("read with the hexadecimal form: %q, %v", got, err)
	}
	if _, err := objstore.Open(ctx, url, objstore.Options{EncryptionKeyFile: filepath.Join(dir, "absent")}); err == nil {
		t.Error("absent key file: no error")
	}
}
