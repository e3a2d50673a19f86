package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// checkHash runs `quantykube check hash` with args and -o json.
func checkHash(t *testing.T, args ...string) (hashReport, error) {
	t.Helper()
	var out, errs bytes.Buffer
	err := CheckCommand{}.Run(t.Context(), append([]string{"hash", "-o", "json"}, args...), &out, &errs)
	var rep hashReport
	if err == nil {
		if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
			t.Fatalf("check hash -o json printed %q: %v", out.String(), jerr)
		}
	}
	return rep, err
}

// check hash reads a store a server is running on (the server keeps
// serving), and agrees with the server's HashKV as etcdctl prints it and
// with a backup of the store: the same hash at the same revision; an
// older revision's hash does not move while the server writes.
func TestCheckHashBesideServer(t *testing.T) {
	ctx := t.Context()
	x := framework.Start(t, framework.SQLite, framework.Options{Process: true})
	cli := x.Client(t)
	for i := range 50 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/k/%02d", i%20), fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	rep, err := checkHash(t, "--endpoint", x.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Revision != 52 || rep.Keys != 21 || len(rep.Hash) != 64 {
		t.Fatalf("check hash: %+v, want revision 52 and 21 keys", rep)
	}

	etcdctl, err := framework.EtcdctlBinary()
	if err != nil {
		framework.Unavailable(t, "etcdctl", err)
	}
	out, err := exec.CommandContext(ctx, etcdctl, "--endpoints", x.Endpoint(), "endpoint", "hashkv", "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdctl endpoint hashkv: %v", err)
	}
	var kv []struct {
		Endpoint string
		HashKV   struct {
			Hash         uint32 `json:"hash"`
			HashRevision int64  `json:"hash_revision"`
		}
	}
	if err := json.Unmarshal(out, &kv); err != nil || len(kv) != 1 {
		t.Fatalf("etcdctl endpoint hashkv -w json: %s: %v", out, err)
	}
	if rep.HashKV == nil || kv[0].HashKV.Hash != *rep.HashKV || kv[0].HashKV.HashRevision != rep.Revision {
		t.Fatalf("etcdctl endpoint hashkv: %d at %d; check hash: %v at %d", kv[0].HashKV.Hash, kv[0].HashKV.HashRevision, rep.HashKV, rep.Revision)
	}

	// Later writes leave revision 52's hash as it was.
	if _, err := cli.Delete(ctx, "/k/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	again, err := checkHash(t, "--endpoint", x.DSN(), "--revision", "52")
	if err != nil || again.Hash != rep.Hash {
		t.Fatalf("check hash --revision 52 after a delete: %+v, %v; before it %s", again, err, rep.Hash)
	}
	latest, err := checkHash(t, "--endpoint", x.DSN(), "--history-from", "52")
	if err != nil || latest.Hash == rep.Hash || latest.Keys != 1 || latest.Revisions != 1 || latest.Changes != 20 || latest.HashKV != nil {
		t.Fatalf("check hash --history-from 52 after deleting 20 keys: %+v, %v", latest, err)
	}

	file := filepath.Join(t.TempDir(), "backup.db")
	if err := (BackupCommand{}).Run(ctx, []string{"--endpoint", x.DSN(), file}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--revision", "52"}, {"--history-from", "52"}, {"--history-from", "1"}} {
		live, err := checkHash(t, append([]string{"--endpoint", x.DSN()}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		backup, err := checkHash(t, append([]string{"--endpoint", "sqlite://" + file}, args...)...)
		if err != nil || backup.Hash != live.Hash {
			t.Fatalf("check hash %q of the backup: %+v, %v; of the store %s", args, backup, err, live.Hash)
		}
	}
	// The server served throughout.
	if _, err := cli.Put(ctx, "/after", "x"); err != nil {
		t.Fatalf("a write after the checks: %v", err)
	}
}

// check hash refuses what it cannot hash, with an error that says why.
func TestCheckHashRefusals(t *testing.T) {
	ctx := t.Context()
	x := framework.Start(t, framework.SQLite, framework.Options{})
	cli := x.Client(t)
	for i := range 5 {
		if _, err := cli.Put(ctx, "/k", fmt.Sprint(i)); err != nil { // 2..6
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, 4); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	notStore := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(notStore, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--endpoint is required"},
		{[]string{"--endpoint", x.DSN(), "--revision", "7"}, "hash at 7 (the store is at 6): mvcc: required revision is a future revision"},
		{[]string{"--endpoint", x.DSN(), "--revision", "3"}, "hash at 3 (the floor is 4): mvcc: required revision has been compacted"},
		{[]string{"--endpoint", x.DSN(), "--history-from", "2"}, "the history from 2 reaches below the floor 4"},
		{[]string{"--endpoint", x.DSN(), "--revision", "5", "--history-from", "6"}, "the history from 6 begins after the revision hashed, 5"},
		{[]string{"--endpoint", x.DSN(), "--revision", "-1"}, "--revision -1: want a revision"},
		{[]string{"--endpoint", x.DSN(), "-o", "yaml"}, `-o "yaml": want text, json or hex`},
		{[]string{"--endpoint", "redis://127.0.0.1:6379"}, `unknown scheme "redis"`},
		{[]string{"--endpoint", "http://127.0.0.1:2379"}, "is an etcd server, not a database"},
		{[]string{"--endpoint", "sqlite://" + filepath.Join(dir, "none.db")}, "no QuantyKube store"},
		{[]string{"--endpoint", "sqlite://" + notStore}, "no QuantyKube store"},
		{[]string{"--endpoint", "postgres://u:secret@127.0.0.1:1/db"}, "postgres: connect to 127.0.0.1:1/db"},
	} {
		var out, errs bytes.Buffer
		err := CheckCommand{}.Run(ctx, append([]string{"hash"}, c.args...), &out, &errs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check hash %q: %v, want an error with %q", c.args, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("check hash %q: the error shows the password: %v", c.args, err)
		}
	}
	// Text and hex name the same hash.
	var text, hex bytes.Buffer
	if err := (CheckCommand{}).Run(ctx, []string{"hash", "--endpoint", x.DSN()}, &text, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := (CheckCommand{}).Run(ctx, []string{"hash", "--endpoint", x.DSN(), "-o", "hex"}, &hex, io.Discard); err != nil {
		t.Fatal(err)
	}
	if h := strings.TrimSpace(hex.String()); len(h) != 64 || !strings.HasPrefix(text.String(), "hash      "+h+"\n") {
		t.Fatalf("check hash: text\n%s\nhex %s", text.String(), hex.String())
	}
}
