package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// get is key's value in the store at path ("" when absent), opened and
// closed again.
func get(t *testing.T, path, key string) (string, int64) {
	t.Helper()
	s := openStore(t, path)
	defer s.Close()
	res, err := s.Range(context.Background(), &pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Kvs) == 0 {
		return "", res.Rev
	}
	return string(res.Kvs[0].Value), res.Rev
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A backup that was served (docs/backup.md: a backup is a store as it is)
// and left with a WAL, by a crash or a copy taken while it was open, holds
// its newest writes in that WAL: restore brings them back too.
func TestRestoreReadsTheBackupsWAL(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "state.db")
	s := openStore(t, src)
	put(t, s, "/k", "old")
	s.Close()
	backup := filepath.Join(dir, "backup.db")
	if _, err := dialect(t, src).Backup(context.Background(), backup); err != nil {
		t.Fatal(err)
	}

	// Served, written, and copied with its WAL while open.
	served := openStore(t, backup)
	put(t, served, "/k", "newest")
	copied := filepath.Join(t.TempDir(), "copied.db")
	copyFile(t, backup, copied)
	copyFile(t, backup+"-wal", copied+"-wal")
	served.Close()
	if st, err := os.Stat(copied + "-wal"); err != nil || st.Size() == 0 {
		t.Fatalf("the copy has no WAL to restore from: %v", err)
	}

	target := filepath.Join(t.TempDir(), "restored.db")
	info, err := dialect(t, target).Restore(context.Background(), copied, false)
	if err != nil {
		t.Fatal(err)
	}
	v, rev := get(t, target, "/k")
	if v != "newest" || rev != 3 || info.Rev != 3 {
		t.Errorf("restored /k=%q at revision %d (reported %d), want the WAL's write: newest at 3", v, rev, info.Rev)
	}
}

// An interrupted restore (SIGINT cancels its context) leaves the store it
// was to replace as it was, and no partial file behind.
func TestRestoreInterrupted(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "state.db")
	s := openStore(t, src)
	// Large enough that the copy takes a while after it starts.
	big := bytes.Repeat([]byte("x"), 1<<20)
	var ops []*pb.RequestOp
	for i := range 48 {
		ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "/big/%02d", i), Value: big}}})
	}
	if _, err := s.Txn(context.Background(), &pb.TxnRequest{Success: ops}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	backup := filepath.Join(dir, "backup.db")
	if _, err := dialect(t, src).Backup(context.Background(), backup); err != nil {
		t.Fatal(err)
	}

	target := filepath.Join(t.TempDir(), "target.db")
	ts := openStore(t, target)
	put(t, ts, "/mine", "kept")
	ts.Close()

	// Interrupted as soon as the restore starts writing its copy.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(target + ".restoring"); err == nil {
				cancel()
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	_, err := dialect(t, target).Restore(ctx, backup, true)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted restore: %v, want %v", err, context.Canceled)
	}
	if v, _ := get(t, target, "/mine"); v != "kept" {
		t.Errorf("the store an interrupted restore was to replace: /mine=%q, want kept", v)
	}
	if _, err := os.Stat(target + ".restoring"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an interrupted restore left its copy behind: %v", err)
	}
}
