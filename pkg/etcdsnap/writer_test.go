package etcdsnap

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The key bucket's records are etcd's own mvccpb.KeyValue bytes, zero
// fields left out alike.
func TestMarshalKeyValueIsEtcds(t *testing.T) {
	for _, kv := range []KeyValue{
		{Key: []byte("/registry/pods/default/a"), Value: []byte("k8s\x00..."), CreateRevision: 5, ModRevision: 9, Version: 3, Lease: 0x7bee70a396139b7},
		{Key: []byte("k"), CreateRevision: 1, ModRevision: 1, Version: 1},
		{Key: []byte{0xff, 0}, Value: bytes.Repeat([]byte{1}, 300), CreateRevision: 1 << 40, ModRevision: 1 << 41, Version: 200, Lease: -1},
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&mvccpb.KeyValue{Key: kv.Key, Value: kv.Value,
			CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease})
		if err != nil {
			t.Fatal(err)
		}
		if got := marshalKeyValue(&kv); !bytes.Equal(got, want) {
			t.Errorf("%q: marshalled %x, etcd's %x", kv.Key, got, want)
		}
	}
}

// A lease record is leasepb.Lease: ID 1, TTL 2.
func TestMarshalLease(t *testing.T) {
	b := marshalLease(0x1234, 600)
	fields := map[protowire.Number]uint64{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType {
			t.Fatalf("bad tag in %x", b)
		}
		v, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			t.Fatalf("bad varint in %x", b)
		}
		fields[num] = v
		b = b[n+m:]
	}
	if len(fields) != 2 || fields[1] != 0x1234 || fields[2] != 600 {
		t.Fatalf("lease fields %v, want ID 0x1234 and TTL 600", fields)
	}
}

// A finished snapshot is a bbolt file with its SHA-256 after it, holding
// the keys at their revisions (sub-revisions apart within one), the
// leases, and the meta etcd v3.6 starts from.
func TestWriterWritesSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.db")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []KeyValue{
		{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 4, Version: 2},
		{Key: []byte("b"), Value: []byte("2"), CreateRevision: 4, ModRevision: 4, Version: 1, Lease: 7},
	} {
		if err := w.Put(kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Lease(7, 600); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(6); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".part"); !os.IsNotExist(err) {
		t.Errorf("the .part file is left: %v", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw)%512 != sha256.Size {
		t.Fatalf("the file is %d bytes: restore would find no hash", len(raw))
	}
	body := raw[:len(raw)-sha256.Size]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], raw[len(body):]) {
		t.Fatal("the trailer is not the SHA-256 of the bbolt file")
	}
	db := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(db, body, 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	err = bdb.View(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				t.Errorf("no bucket %s", b)
			}
		}
		keys := tx.Bucket(bucketKey)
		for _, sub := range []int64{0, 1} {
			if keys.Get(revBytes(4, sub)) == nil {
				t.Errorf("no key at revision 4 sub %d", sub)
			}
		}
		if keys.Stats().KeyN != 2 {
			t.Errorf("%d keys, want 2", keys.Stats().KeyN)
		}
		if tx.Bucket(bucketLease).Get(uint64Bytes(7)) == nil {
			t.Error("no lease 7")
		}
		meta := tx.Bucket(bucketMeta)
		for _, k := range [][]byte{metaScheduledCompact, metaFinishedCompact} {
			if v := meta.Get(k); len(v) != revBytesLen || binary.BigEndian.Uint64(v) != 6 {
				t.Errorf("meta %s is %x, want revision 6", k, v)
			}
		}
		if v := string(meta.Get(metaStorageVersion)); v != Version {
			t.Errorf("storage version %q, want %q", v, Version)
		}
		if v := string(tx.Bucket(bucketCluster).Get(clusterVersion)); v != Version {
			t.Errorf("cluster version %q, want %q", v, Version)
		}
		if v := tx.Bucket(bucketAuth).Get(authEnabled); !bytes.Equal(v, []byte{0}) {
			t.Errorf("auth enabled %x, want 00", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Bad input is refused with an error that names it, and leaves no file.
func TestWriterRefuses(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists")
	if err := os.WriteFile(exists, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(exists); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("Create over a file: %v", err)
	}
	path := filepath.Join(dir, "snap.db")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kv   KeyValue
		want string
	}{
		{KeyValue{CreateRevision: 1, ModRevision: 1, Version: 1}, "empty"},
		{KeyValue{Key: []byte("k"), CreateRevision: 3, ModRevision: 2, Version: 1}, "not revisions"},
		{KeyValue{Key: []byte("k"), CreateRevision: 0, ModRevision: 2, Version: 1}, "not revisions"},
		{KeyValue{Key: []byte("k"), CreateRevision: 1, ModRevision: 2, Version: 0}, "version"},
	} {
		if err := w.Put(c.kv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Put(%+v): %v, want an error with %q", c.kv, err, c.want)
		}
	}
	if err := w.Lease(0, 10); err == nil {
		t.Error("lease 0 taken")
	}
	if err := w.Put(KeyValue{Key: []byte("k"), CreateRevision: 1, ModRevision: 9, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(8); err == nil || !strings.Contains(err.Error(), "below") {
		t.Errorf("Finish below a key's revision: %v", err)
	}
	for _, p := range []string{path, path + ".part"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after a refused snapshot: %v", p, err)
		}
	}
}

// A snapshot written over many transactions holds every record.
func TestWriterCommitsAsItGoes(t *testing.T) {
	old := txBytes
	txBytes = 200
	defer func() { txBytes = old }()
	path := filepath.Join(t.TempDir(), "snap.db")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		kv := KeyValue{Key: []byte(strconv.Itoa(i)), Value: bytes.Repeat([]byte{'v'}, 50), CreateRevision: 2, ModRevision: int64(2 + i/3), Version: 1}
		if err := w.Put(kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(n); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(db, raw[:len(raw)-sha256.Size], 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.View(func(tx *bolt.Tx) error {
		if got := tx.Bucket(bucketKey).Stats().KeyN; got != n {
			t.Errorf("%d keys, want %d", got, n)
		}
		if tx.Bucket(bucketMeta).Get(metaFinishedCompact) == nil {
			t.Error("no compacted revision")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
