package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// backend is one way to reach a store: each test body runs once per
// backend, so every backend keeps the same promises.
type backend struct {
	name string
	// url returns the URL of an empty store of t's own.
	url  func(t *testing.T) string
	opts objstore.Options
}

func (b backend) open(t *testing.T) objstore.Store {
	t.Helper()
	st, err := objstore.Open(context.Background(), b.url(t), b.opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", b.name, err)
	}
	return st
}

// runSuite runs every body of the common suite against b, in plain and
// encrypted, and the checks of the encrypted format on b.
func runSuite(t *testing.T, b backend) {
	t.Run("plain", func(t *testing.T) { runBodies(t, b) })
	enc := b
	enc.opts.EncryptionKeyFile = writeKey(t, 1)
	t.Run("encrypted", func(t *testing.T) { runBodies(t, enc) })
	t.Run("tampered", func(t *testing.T) { testTampered(t, b) })
}

func runBodies(t *testing.T, b backend) {
	t.Run("PutGetListDelete", func(t *testing.T) { testPutGetListDelete(t, b.open(t)) })
	t.Run("NotExist", func(t *testing.T) { testNotExist(t, b.open(t)) })
	t.Run("AtomicVisibility", func(t *testing.T) { testAtomicVisibility(t, b.open(t)) })
	t.Run("FailedPut", func(t *testing.T) { testFailedPut(t, b.open(t)) })
	t.Run("BadNames", func(t *testing.T) { testBadNames(t, b.open(t)) })
	t.Run("Large", func(t *testing.T) { testLarge(t, b.open(t)) })
}

func put(t *testing.T, st objstore.Store, name, body string, size int64) {
	t.Helper()
	if err := st.Put(context.Background(), name, strings.NewReader(body), size); err != nil {
		t.Fatalf("Put(%s): %v", name, err)
	}
}

func get(t *testing.T, st objstore.Store, name string) string {
	t.Helper()
	rc, err := st.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%s): read: %v", name, err)
	}
	return string(b)
}

func names(t *testing.T, st objstore.Store, prefix string) []string {
	t.Helper()
	objs, err := st.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
		if o.ModTime.IsZero() {
			t.Errorf("List(%q): %s has no ModTime", prefix, o.Name)
		}
	}
	return out
}

func equal(a, b []string) bool {
	return fmt.Sprint(a) == fmt.Sprint(b) && len(a) == len(b)
}

func testPutGetListDelete(t *testing.T, st objstore.Store) {
	ctx := context.Background()
	objs := map[string]string{
		"segments/0000000000000010-0000000000000019": "ten to nineteen",
		"segments/0000000000000002-0000000000000009": "two to nine",
		"segments-old/x":         "beside segments/, not under it",
		"bases/0000000000000001": "base at one",
		"a":                      "top level",
		"empty":                  "",
	}
	for name, body := range objs {
		size := int64(len(body))
		var r io.Reader = strings.NewReader(body)
		switch {
		case strings.HasPrefix(name, "segments/"):
			size = -1 // unknown sizes too
		case strings.HasPrefix(name, "bases/") || name == "empty":
			r = bytes.NewReader([]byte(body)) // in memory, as the replicator's segments
		}
		if err := st.Put(ctx, name, r, size); err != nil {
			t.Fatalf("Put(%s): %v", name, err)
		}
	}
	for name, body := range objs {
		if got := get(t, st, name); got != body {
			t.Errorf("Get(%s) = %q, want %q", name, got, body)
		}
	}
	all, err := st.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(objs) {
		t.Fatalf("List(\"\") = %d objects, want %d: %v", len(all), len(objs), all)
	}
	for i, o := range all {
		if i > 0 && all[i-1].Name >= o.Name {
			t.Errorf("List not sorted: %s before %s", all[i-1].Name, o.Name)
		}
		if body, ok := objs[o.Name]; !ok {
			t.Errorf("List: unexpected %s", o.Name)
		} else if !isEncrypted(st) && o.Size != int64(len(body)) {
			t.Errorf("List: %s size %d, want %d", o.Name, o.Size, len(body))
		}
	}
	for prefix, want := range map[string][]string{
		"segments/":                {"segments/0000000000000002-0000000000000009", "segments/0000000000000010-0000000000000019"},
		"segments":                 {"segments-old/x", "segments/0000000000000002-0000000000000009", "segments/0000000000000010-0000000000000019"},
		"segments/00000000000000":  {"segments/0000000000000002-0000000000000009", "segments/0000000000000010-0000000000000019"},
		"segments/000000000000001": {"segments/0000000000000010-0000000000000019"},
		"bases/":                   {"bases/0000000000000001"},
		"nothing/":                 nil,
		"nothing":                  nil,
		"e":                        {"empty"},
	} {
		if got := names(t, st, prefix); !equal(got, want) {
			t.Errorf("List(%q) = %v, want %v", prefix, got, want)
		}
	}
	// An overwrite replaces the whole object.
	put(t, st, "a", "second version", -1)
	if got := get(t, st, "a"); got != "second version" {
		t.Errorf("Get(a) after overwrite = %q", got)
	}
	for name := range objs {
		if err := st.Delete(ctx, name); err != nil {
			t.Fatalf("Delete(%s): %v", name, err)
		}
	}
	if got := names(t, st, ""); len(got) != 0 {
		t.Errorf("List after deleting everything = %v", got)
	}
	if err := st.Delete(ctx, "a"); err != nil {
		t.Errorf("Delete of an absent object: %v", err)
	}
}

func testNotExist(t *testing.T, st objstore.Store) {
	ctx := context.Background()
	rc, err := st.Get(ctx, "bases/absent")
	if err == nil {
		rc.Close()
		t.Fatal("Get of an absent object: no error")
	}
	if !errors.Is(err, objstore.ErrNotExist) {
		t.Errorf("Get of an absent object: %v, does not wrap ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), "bases/absent") {
		t.Errorf("Get of an absent object: %v, does not name it", err)
	}
	// A prefix of other names is not an object.
	put(t, st, "dir/x", "x", 1)
	if rc, err := st.Get(ctx, "dir"); !errors.Is(err, objstore.ErrNotExist) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Get of a prefix of an object's name: %v, want ErrNotExist", err)
	}
	if err := st.Delete(ctx, "dir"); err != nil {
		t.Errorf("Delete of a prefix: %v", err)
	}
	if got := get(t, st, "dir/x"); got != "x" {
		t.Errorf("Delete of a prefix touched dir/x: %q", got)
	}
}

// blockingReader gives its first part, then waits for release: the Put is
// then under way, its object not yet complete.
type blockingReader struct {
	first   []byte
	reached chan struct{}
	release chan error // nil: finish with rest; an error: fail with it
	rest    []byte
	state   int
}

func (r *blockingReader) Read(p []byte) (int, error) {
	switch r.state {
	case 0:
		n := copy(p, r.first)
		r.first = r.first[n:]
		if len(r.first) == 0 {
			r.state = 1
		}
		return n, nil
	case 1:
		close(r.reached)
		if err := <-r.release; err != nil {
			r.state = 3
			return 0, err
		}
		r.state = 2
		fallthrough
	case 2:
		if len(r.rest) == 0 {
			return 0, io.EOF
		}
		n := copy(p, r.rest)
		r.rest = r.rest[n:]
		return n, nil
	}
	return 0, errors.New("read after failure")
}

func testAtomicVisibility(t *testing.T, st objstore.Store) {
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		name := fmt.Sprintf("bases/atomic-%v", fail)
		br := &blockingReader{
			first:   bytes.Repeat([]byte("a"), 100<<10),
			rest:    bytes.Repeat([]byte("b"), 100<<10),
			reached: make(chan struct{}),
			release: make(chan error, 1),
		}
		errc := make(chan error, 1)
		go func() { errc <- st.Put(ctx, name, br, -1) }()
		select {
		case <-br.reached:
		case err := <-errc:
			t.Fatalf("Put returned before reading all of its first part: %v", err)
		}
		// Half written: neither Get nor List sees it.
		if rc, err := st.Get(ctx, name); !errors.Is(err, objstore.ErrNotExist) {
			if err == nil {
				rc.Close()
			}
			t.Errorf("Get during Put: %v, want ErrNotExist", err)
		}
		if got := names(t, st, "bases/"); len(got) != 0 {
			t.Errorf("List during Put = %v, want nothing", got)
		}
		if fail {
			br.release <- errors.New("source failed")
		} else {
			br.release <- nil
		}
		err := <-errc
		switch {
		case fail && err == nil:
			t.Error("Put of a failing reader: no error")
		case fail && !strings.Contains(err.Error(), "source failed"):
			t.Errorf("Put of a failing reader: %v, does not say why", err)
		case !fail && err != nil:
			t.Fatalf("Put: %v", err)
		}
		if fail {
			if got := names(t, st, ""); len(got) != 0 {
				t.Errorf("List after a failed Put = %v, want nothing", got)
			}
			continue
		}
		if got := get(t, st, name); len(got) != 200<<10 || got[0] != 'a' || got[len(got)-1] != 'b' {
			t.Errorf("Get after Put: %d bytes", len(got))
		}
		if err := st.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
}

func testFailedPut(t *testing.T, st objstore.Store) {
	ctx := context.Background()
	// Shorter than the size given.
	if err := st.Put(ctx, "short", strings.NewReader("12345"), 10); err == nil {
		t.Error("Put of 5 bytes with size 10: no error")
	}
	// Longer than the size given.
	if err := st.Put(ctx, "long", strings.NewReader("12345"), 3); err == nil {
		t.Error("Put of 5 bytes with size 3: no error")
	}
	// The same from memory (a *bytes.Reader, which a store may send as it is).
	if err := st.Put(ctx, "short", bytes.NewReader([]byte("12345")), 10); err == nil {
		t.Error("Put of 5 bytes in memory with size 10: no error")
	}
	if err := st.Put(ctx, "long", bytes.NewReader([]byte("12345")), 3); err == nil {
		t.Error("Put of 5 bytes in memory with size 3: no error")
	}
	// A context ended mid-way.
	cctx, cancel := context.WithCancel(ctx)
	br := &blockingReader{
		first:   []byte("first part"),
		rest:    []byte("rest"),
		reached: make(chan struct{}),
		release: make(chan error, 1),
	}
	errc := make(chan error, 1)
	go func() { errc <- st.Put(cctx, "cancelled", br, -1) }()
	<-br.reached
	cancel()
	br.release <- nil
	if err := <-errc; err == nil {
		t.Error("Put with its context cancelled mid-way: no error")
	}
	if got := names(t, st, ""); len(got) != 0 {
		t.Errorf("List after failed Puts = %v, want nothing", got)
	}
}

func testBadNames(t *testing.T, st objstore.Store) {
	ctx := context.Background()
	for _, name := range []string{"", "/abs", "a/../b", "./a", "a//b", "a/", ".hidden", "a/.b", "a\\b", strings.Repeat("x", 1000)} {
		if err := st.Put(ctx, name, strings.NewReader("x"), 1); err == nil {
			t.Errorf("Put(%q): no error", name)
		}
		if rc, err := st.Get(ctx, name); err == nil {
			rc.Close()
			t.Errorf("Get(%q): no error", name)
		}
		if err := st.Delete(ctx, name); err == nil {
			t.Errorf("Delete(%q): no error", name)
		}
	}
	for _, prefix := range []string{"/", "../", "a/../", "a//"} {
		if _, err := st.List(ctx, prefix); err == nil {
			t.Errorf("List(%q): no error", prefix)
		}
	}
}

// largeSize is the large object's size: bigger than any buffer a backend
// may hold (a multipart upload's parts), so holding it whole would show.
const largeSize = 64 << 20

// genReader yields n pseudo-random bytes from seed, hashing them, and
// samples the heap every 4 MiB.
type genReader struct {
	rng      *rand.ChaCha8
	left     int64
	h        hashWriter
	sinceMem int64
	maxHeap  uint64
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.left == 0 {
		g.sample()
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n, _ := g.rng.Read(p)
	g.h.Write(p[:n])
	g.left -= int64(n)
	g.sinceMem += int64(n)
	if g.sinceMem >= 4<<20 {
		g.sinceMem = 0
		g.sample()
	}
	return n, nil
}

func (g *genReader) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	g.maxHeap = max(g.maxHeap, ms.HeapAlloc)
}

func testLarge(t *testing.T, st objstore.Store) {
	if testing.Short() {
		t.Skip("-short: no 64 MiB object")
	}
	ctx := context.Background()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g := &genReader{rng: rand.NewChaCha8([32]byte{1}), left: largeSize, h: sha256.New()}
	if err := st.Put(ctx, "bases/large", g, -1); err != nil {
		t.Fatalf("Put of %d bytes: %v", largeSize, err)
	}
	// Held whole, the object would be on the heap when its last byte is read.
	if grew := int64(g.maxHeap) - int64(before.HeapAlloc); grew > largeSize/2 {
		t.Errorf("the heap grew by %d MiB during a streamed Put of %d MiB", grew>>20, largeSize>>20)
	}
	want := g.h.Sum(nil)
	rc, err := st.Get(ctx, "bases/large")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		t.Fatalf("Get: read after %d bytes: %v", n, err)
	}
	if n != largeSize || !bytes.Equal(h.Sum(nil), want) {
		t.Fatalf("Get: %d bytes, sha256 %x; want %d, %x", n, h.Sum(nil), largeSize, want)
	}
	objs, err := st.List(ctx, "bases/large")
	if err != nil || len(objs) != 1 {
		t.Fatalf("List: %v, %v", objs, err)
	}
	if !isEncrypted(st) && objs[0].Size != largeSize {
		t.Errorf("List: size %d, want %d", objs[0].Size, largeSize)
	}
	if err := st.Delete(ctx, "bases/large"); err != nil {
		t.Fatal(err)
	}
}

// isEncrypted says whether st encrypts (sizes listed are the ciphertext's).
func isEncrypted(st objstore.Store) bool {
	return strings.HasSuffix(st.String(), " (encrypted)")
}
