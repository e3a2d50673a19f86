package objstore

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// The encrypted format, version 1. An object is a header, then the
// plaintext in chunks of chunkSize bytes, each sealed with AES-256-GCM:
//
//	header: "QKOS" | version (1 byte) | key id (8) | salt (32)
//	chunk:  ciphertext | tag (16)
//
// Each object has a key of its own, HKDF-SHA256 of the key and the
// object's random salt, so nonces need only be unique inside it: a chunk's
// is its number (8 bytes, big-endian), 3 zero bytes and 1 for the last
// chunk, 0 before. Every chunk but the last holds exactly chunkSize bytes;
// the last holds fewer, possibly none. The associated data of each chunk
// is the header and the object's name, so an object copied under another
// name, a header changed, chunks reordered, dropped or cut, and data
// appended all fail authentication. The key id (HMAC-SHA256 of the key, 8
// bytes) tells a wrong key from a corrupted object.
const (
	cryptMagic   = "QKOS"
	cryptVersion = 1
	chunkSize    = 64 << 10
	tagSize      = 16
	keyIDSize    = 8
	saltSize     = 32
	headerSize   = len(cryptMagic) + 1 + keyIDSize + saltSize
)

// readKeyFile reads a 256-bit key: a file of exactly 32 bytes (raw), or of
// 64 hexadecimal characters, which may end in white space.
func readKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encryption key file: %w", err)
	}
	if len(b) == 32 {
		return b, nil
	}
	if t := bytes.TrimRight(b, " \t\r\n"); len(t) == 64 {
		if key, err := hex.DecodeString(string(t)); err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("encryption key file %s: %d bytes: want 32 raw bytes or 64 hexadecimal characters (a new key: head -c 32 /dev/urandom > %s)", path, len(b), path)
}

// encStore encrypts every object of the store it wraps.
type encStore struct {
	inner Store
	key   []byte
	keyID [keyIDSize]byte
}

func newEncrypted(inner Store, key []byte) Store {
	e := &encStore{inner: inner, key: key}
	copy(e.keyID[:], keyID(key))
	return e
}

func keyID(key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("quantykube objstore key id"))
	return m.Sum(nil)[:keyIDSize]
}

func (e *encStore) String() string { return e.inner.String() + " (encrypted)" }

// aead is the object's own AES-256-GCM, from the key and the salt.
func (e *encStore) aead(salt []byte) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, e.key, salt, "quantykube objstore v1 chunk key", 32)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func nonce(n uint64, last bool) []byte {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], n)
	if last {
		b[11] = 1
	}
	return b[:]
}

// encryptedSize is the stored size of size bytes of plaintext.
func encryptedSize(size int64) int64 {
	if size < 0 {
		return -1
	}
	return int64(headerSize) + size + tagSize*(size/chunkSize+1)
}

func (e *encStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("%s: put: %w", e, err)
	}
	hdr := make([]byte, 0, headerSize)
	hdr = append(hdr, cryptMagic...)
	hdr = append(hdr, cryptVersion)
	hdr = append(hdr, e.keyID[:]...)
	salt := make([]byte, saltSize)
	rand.Read(salt)
	hdr = append(hdr, salt...)
	aead, err := e.aead(salt)
	if err != nil {
		return fmt.Errorf("%s: object %s: %w", e, name, err)
	}
	er := &encReader{src: r, aead: aead, ad: append(hdr[:headerSize:headerSize], name...), out: hdr, pt: make([]byte, chunkSize)}
	return e.inner.Put(ctx, name, er, encryptedSize(size))
}

// encReader yields the header, then the sealed chunks of src.
type encReader struct {
	src  io.Reader
	aead cipher.AEAD
	ad   []byte
	out  []byte // sealed, not yet read
	pt   []byte
	n    uint64
	done bool
	err  error
}

func (r *encReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		k, err := io.ReadFull(r.src, r.pt)
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF: // fewer than a chunk: the last
			r.done = true
		case err != nil:
			r.err = err
			return 0, err
		}
		r.out = r.aead.Seal(r.out[:0], nonce(r.n, r.done), r.pt[:k], r.ad)
		r.n++
	}
	k := copy(p, r.out)
	r.out = r.out[k:]
	return k, nil
}

func (e *encStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := e.inner.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, headerSize)
	if n, err := io.ReadFull(rc, hdr); err != nil {
		rc.Close()
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%s: object %s: %d bytes, shorter than the encryption header: truncated or not encrypted", e, name, n)
		}
		return nil, fmt.Errorf("%s: object %s: %w", e, name, err)
	}
	if string(hdr[:len(cryptMagic)]) != cryptMagic {
		rc.Close()
		return nil, fmt.Errorf("%s: object %s: not encrypted (no %q header), or corrupted", e, name, cryptMagic)
	}
	if v := hdr[len(cryptMagic)]; v != cryptVersion {
		rc.Close()
		return nil, fmt.Errorf("%s: object %s: encryption format version %d, this binary reads %d", e, name, v, cryptVersion)
	}
	if id := hdr[len(cryptMagic)+1 : len(cryptMagic)+1+keyIDSize]; !bytes.Equal(id, e.keyID[:]) {
		rc.Close()
		return nil, fmt.Errorf("%s: object %s: encrypted with another key (key id %x; this key's is %x)", e, name, id, e.keyID)
	}
	aead, err := e.aead(hdr[headerSize-saltSize:])
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("%s: object %s: %w", e, name, err)
	}
	return &decReader{src: rc, aead: aead, ad: append(hdr, name...), e: e, name: name,
		ct: make([]byte, chunkSize+tagSize+1), pt: make([]byte, 0, chunkSize)}, nil
}

// decReader opens the chunks of src one at a time, reading one byte past
// each to know whether it is the last.
type decReader struct {
	src  io.ReadCloser
	aead cipher.AEAD
	ad   []byte
	e    *encStore
	name string
	ct   []byte // a sealed chunk and the byte after it
	have int    // bytes at the front of ct read ahead (0 or 1)
	pt   []byte
	out  []byte // opened, not yet read
	n    uint64
	done bool
	err  error
}

func (r *decReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.done {
			return 0, io.EOF
		}
		k, err := io.ReadFull(r.src, r.ct[r.have:])
		k += r.have
		last := false
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			last = true
		case err != nil:
			r.err = err // the store's error names the object already
			return 0, err
		}
		sealed := k
		if !last {
			sealed = k - 1 // the byte after the chunk
		}
		if sealed < tagSize {
			r.err = fmt.Errorf("%s: object %s: truncated: chunk %d is %d bytes, shorter than its tag", r.e, r.name, r.n, sealed)
			return 0, r.err
		}
		pt, err := r.aead.Open(r.pt[:0], nonce(r.n, last), r.ct[:sealed], r.ad)
		if err != nil {
			r.err = fmt.Errorf("%s: object %s: chunk %d (at byte %d) fails authentication: corrupted, truncated, or another object's",
				r.e, r.name, r.n, int64(headerSize)+int64(r.n)*(chunkSize+tagSize))
			return 0, r.err
		}
		r.out, r.done = pt, last
		r.n++
		r.have = 0
		if !last {
			r.ct[0], r.have = r.ct[sealed], 1
		}
	}
	k := copy(p, r.out)
	r.out = r.out[k:]
	return k, nil
}

func (r *decReader) Close() error { return r.src.Close() }

func (e *encStore) List(ctx context.Context, prefix string) ([]Object, error) {
	return e.inner.List(ctx, prefix)
}

func (e *encStore) Delete(ctx context.Context, name string) error {
	return e.inner.Delete(ctx, name)
}
