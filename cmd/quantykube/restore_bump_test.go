package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// A restore of an older backup over a store that served later revisions
// moves the restored revision past them and marks it compacted, as
// etcdutl's snapshot restore --bump-revision --mark-compacted does: a
// watcher that followed the old store is cancelled with the compact
// revision when its server comes back, writes take revisions past every
// one handed out, and a read at a lost revision answers compacted. (The
// restored store used to hand the lost revisions out again.) Over a
// store at or behind the backup, nothing moves.
func TestRestoreOlderBackupBumpsRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	x := framework.Start(t, framework.SQLite, framework.Options{Process: true})
	cli := x.Client(t)
	put := func(key string) int64 {
		t.Helper()
		r, err := cli.Put(ctx, key, "v")
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		return r.Header.Revision
	}
	for i := range 3 {
		put(fmt.Sprintf("/b/kept/%d", i))
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	var out bytes.Buffer
	if err := (BackupCommand{}).Run(ctx, []string{"--endpoint", x.DSN(), file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var served int64
	for i := range 5 {
		served = put(fmt.Sprintf("/b/lost/%d", i))
	}
	wch := cli.Watch(ctx, "/b/", clientv3.WithPrefix(), clientv3.WithRev(served+1))

	x.Stop(t)
	out.Reset()
	if err := (RestoreCommand{}).Run(ctx, []string{"--endpoint", x.DSN(), "--force", file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	bumped := served + mvcc.RevisionBump
	if want := fmt.Sprintf("bumped    to revision %d, past the replaced store's %d", bumped, served); !strings.Contains(out.String(), want) {
		t.Errorf("restore says:\n%s\nwant %q", out.String(), want)
	}
	x.Start(t)

	select {
	case wr := <-wch:
		if wr.CompactRevision != bumped {
			t.Errorf("the watcher from %d after the restore: %+v, want cancelled at compact revision %d", served+1, wr, bumped)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher from before the restore was not cancelled")
	}
	if r := put("/b/after"); r != bumped+1 {
		t.Errorf("a write after the restore: revision %d, want %d", r, bumped+1)
	}
	if _, err := cli.Get(ctx, "/b/kept/0", clientv3.WithRev(served)); err != rpctypes.ErrCompacted {
		t.Errorf("a read at a lost revision: %v, want compacted", err)
	}
	r, err := cli.Get(ctx, "/b/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range r.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if got, want := strings.Join(keys, " "), "/b/after /b/kept/0 /b/kept/1 /b/kept/2"; got != want {
		t.Errorf("keys after the restore: %s, want %s", got, want)
	}

	// The same backup over a store behind it: its revision as it was.
	target := emptyTarget(t, framework.SQLite)
	out.Reset()
	if err := (RestoreCommand{}).Run(ctx, []string{"--endpoint", target.DSN(), "--force", file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "bumped") {
		t.Errorf("a restore into a new store bumped:\n%s", out.String())
	}
}
