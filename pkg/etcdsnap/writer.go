package etcdsnap

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	bolt "go.etcd.io/bbolt"
)

// txBytes bounds what one bbolt transaction writes: bbolt keeps every
// page a transaction dirties in memory until it commits.
var txBytes = 64 << 20

// Writer writes a snapshot: Create, Put and Lease, then Finish (or Abort).
// It writes FILE.part and renames it FILE when finished, so that a
// snapshot that exists is whole.
type Writer struct {
	path, part string
	db         *bolt.DB
	tx         *bolt.Tx
	written    int
	// subs is the next sub-revision of each main revision: the keys one
	// revision changed together each get their own, as etcd gives them.
	subs           map[int64]int64
	maxRev         int64
	Keys, Leases   int64
	KeyBytes, Size int64
}

// Create begins a snapshot at path, which must not exist.
func Create(path string) (*Writer, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("snapshot %s: the file exists: remove it or name another", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	w := &Writer{path: path, part: path + ".part", subs: map[int64]int64{}}
	// A .part file is only ever an unfinished snapshot of ours.
	if err := os.Remove(w.part); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: remove an unfinished %s: %w", path, w.part, err)
	}
	db, err := bolt.Open(w.part, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: create %s: %w", path, w.part, err)
	}
	w.db = db
	if err := w.begin(); err != nil {
		w.Abort()
		return nil, err
	}
	for _, b := range allBuckets {
		if _, err := w.tx.CreateBucketIfNotExists(b); err != nil {
			w.Abort()
			return nil, fmt.Errorf("snapshot %s: create bucket %s: %w", path, b, err)
		}
	}
	return w, nil
}

func (w *Writer) begin() error {
	tx, err := w.db.Begin(true)
	if err != nil {
		return fmt.Errorf("snapshot %s: begin a transaction: %w", w.path, err)
	}
	w.tx, w.written = tx, 0
	return nil
}

// put writes one record, committing when the transaction has written
// txBytes.
func (w *Writer) put(bucket, k, v []byte) error {
	if err := w.tx.Bucket(bucket).Put(k, v); err != nil {
		return fmt.Errorf("snapshot %s: put into %s: %w", w.path, bucket, err)
	}
	w.written += len(k) + len(v)
	if w.written < txBytes {
		return nil
	}
	if err := w.tx.Commit(); err != nil {
		w.tx = nil
		return fmt.Errorf("snapshot %s: commit: %w", w.path, err)
	}
	return w.begin()
}

// Put adds a live key, at its mod revision.
func (w *Writer) Put(kv KeyValue) error {
	switch {
	case len(kv.Key) == 0:
		return fmt.Errorf("snapshot %s: a key is empty", w.path)
	case kv.ModRevision <= 0 || kv.CreateRevision <= 0 || kv.CreateRevision > kv.ModRevision:
		return fmt.Errorf("snapshot %s: key %q: create revision %d and mod revision %d are not revisions of a live key", w.path, kv.Key, kv.CreateRevision, kv.ModRevision)
	case kv.Version <= 0:
		return fmt.Errorf("snapshot %s: key %q: version %d is not a live key's", w.path, kv.Key, kv.Version)
	}
	sub := w.subs[kv.ModRevision]
	w.subs[kv.ModRevision] = sub + 1
	w.maxRev = max(w.maxRev, kv.ModRevision)
	w.Keys++
	w.KeyBytes += int64(len(kv.Key) + len(kv.Value))
	return w.put(bucketKey, revBytes(kv.ModRevision, sub), marshalKeyValue(&kv))
}

// Lease adds a lease with its TTL in seconds.
func (w *Writer) Lease(id, ttl int64) error {
	if id == 0 {
		return fmt.Errorf("snapshot %s: lease ID 0 is no lease", w.path)
	}
	w.Leases++
	return w.put(bucketLease, uint64Bytes(uint64(id)), marshalLease(id, ttl))
}

// Finish writes the meta of a snapshot of the state at rev, then the
// file's SHA-256 after it (as etcdctl snapshot save does, for restore to
// verify) and renames it to its path.
//
// rev is the snapshot's revision and its compacted revision alike: the
// snapshot holds no history, so etcd must answer a read below rev with
// "required revision has been compacted", never with the state at rev;
// etcd answers at rev itself (a compaction keeps its revision's state)
// and its next write is rev+1, even when rev's own change was a delete
// no key records.
func (w *Writer) Finish(rev int64) error {
	if rev < w.maxRev {
		w.Abort()
		return fmt.Errorf("snapshot %s: revision %d is below a key's mod revision %d", w.path, rev, w.maxRev)
	}
	one := uint64Bytes(1)
	meta := [][2][]byte{
		// etcdutl snapshot restore sets both for the cluster it makes.
		{metaConsistentIndex, one},
		{metaTerm, one},
		{metaStorageVersion, []byte(Version)},
	}
	if rev > 0 {
		meta = append(meta, [2][]byte{metaScheduledCompact, revBytes(rev, 0)}, [2][]byte{metaFinishedCompact, revBytes(rev, 0)})
	}
	for _, kv := range meta {
		if err := w.put(bucketMeta, kv[0], kv[1]); err != nil {
			w.Abort()
			return err
		}
	}
	for _, r := range []struct{ b, k, v []byte }{
		{bucketCluster, clusterVersion, []byte(Version)},
		{bucketAuth, authEnabled, []byte{0}},
		{bucketAuth, authRevision, one},
	} {
		if err := w.put(r.b, r.k, r.v); err != nil {
			w.Abort()
			return err
		}
	}
	err := w.tx.Commit()
	w.tx = nil
	if err == nil {
		err = w.db.Close()
		w.db = nil
	}
	if err == nil {
		err = w.appendHash()
	}
	if err == nil {
		err = os.Rename(w.part, w.path)
	}
	if err != nil {
		w.Abort()
		return fmt.Errorf("snapshot %s: %w", w.path, err)
	}
	return nil
}

// appendHash appends the SHA-256 of the bbolt file to it and syncs it.
// Restore takes a file whose size is 32 past a multiple of 512 for one
// with the hash: bbolt's pages make the file itself a multiple.
func (w *Writer) appendHash() error {
	f, err := os.OpenFile(w.part, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("hash %s: %w", w.part, err)
	}
	if n%512 != 0 {
		return fmt.Errorf("%s is %d bytes, not a multiple of 512: restore would not find its hash", w.part, n)
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("append the hash to %s: %w", w.part, err)
	}
	w.Size = n + sha256.Size
	return f.Sync()
}

// Abort gives up the snapshot and removes its unfinished file.
func (w *Writer) Abort() {
	if w.tx != nil {
		_ = w.tx.Rollback()
		w.tx = nil
	}
	if w.db != nil {
		_ = w.db.Close()
		w.db = nil
	}
	_ = os.Remove(w.part)
}
