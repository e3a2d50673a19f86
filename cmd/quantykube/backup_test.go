package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

func loadKey(w int, i int64) string { return fmt.Sprintf("/load/%d/%06d", w, i) }

// A backup taken while `quantykube serve` runs under write load opens,
// passes PRAGMA integrity_check, and holds every write acknowledged before
// it began, with its history; restored under a new server, it serves them
// all through the etcd API, past revisions included.
func TestBackupUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	x := framework.Start(t, framework.SQLite, framework.Options{Process: true})
	cli := x.Client(t)

	// History: one key written five times, each value at its revision.
	hist := map[int64]string{}
	for i := range 5 {
		v := fmt.Sprintf("v%d", i)
		resp, err := cli.Put(ctx, "/hist", v)
		if err != nil {
			t.Fatal(err)
		}
		hist[resp.Header.Revision] = v
	}
	// Enough data that the copy is not instantaneous.
	big := strings.Repeat("b", 4<<10)
	for i := range 20 {
		var ops []clientv3.Op
		for j := range 100 {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/bulk/%02d/%03d", i, j), big))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}

	// Writers, each acknowledging its keys in order: acked[w] = n means
	// keys 0..n-1 of writer w were acknowledged.
	const writers, maxWrites = 4, 3000
	var acked [writers]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	stopWriters := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
		close(errs)
	})
	defer stopWriters()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); i < maxWrites; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := cli.Put(ctx, loadKey(w, i), fmt.Sprint(i)); err != nil {
					errs <- fmt.Errorf("writer %d, put %d: %w", w, i, err)
					return
				}
				acked[w].Store(i + 1)
			}
		}()
	}
	for w := range writers {
		for acked[w].Load() < 20 {
			select {
			case err := <-errs:
				t.Fatalf("before the backup: %v", err)
			case <-ctx.Done():
				t.Fatalf("writer %d: %d writes acknowledged before the test's deadline", w, acked[w].Load())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	var before [writers]int64
	for w := range writers {
		before[w] = acked[w].Load()
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	var out bytes.Buffer
	err := BackupCommand{}.Run(ctx, []string{"--endpoint", x.DSN(), file}, &out, io.Discard)
	during := int64(0)
	for w := range writers {
		during += acked[w].Load() - before[w]
	}
	stopWriters()
	for err := range errs {
		t.Error(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s(%d writes acknowledged while the backup ran)", out.String(), during)
	// The backup's read transaction never blocks the server's writer.
	if during == 0 {
		t.Error("no write was acknowledged while the backup ran")
	}
	// The server kept serving.
	if _, err := cli.Put(ctx, "/after", "x"); err != nil {
		t.Fatalf("a write after the backup: %v", err)
	}

	db, err := sqlite.OpenReadOnly(file)
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check of the backup: %q, %v", check, err)
	}
	db.Close()

	target := emptyTarget(t, framework.SQLite)
	out.Reset()
	if err := (RestoreCommand{}).Run(ctx, []string{"--endpoint", target.DSN(), "--force", file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	target.Start(t)
	rc := target.Client(t)
	for w := range writers {
		resp, err := rc.Get(ctx, fmt.Sprintf("/load/%d/", w), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(resp.Kvs)) < before[w] {
			t.Errorf("writer %d: %d keys in the backup, %d acknowledged before it began", w, len(resp.Kvs), before[w])
		}
		for i, kv := range resp.Kvs {
			if string(kv.Key) != loadKey(w, int64(i)) || string(kv.Value) != fmt.Sprint(i) {
				t.Fatalf("writer %d: key %d is %s=%s", w, i, kv.Key, kv.Value)
			}
		}
	}
	if resp, err := rc.Get(ctx, "/bulk/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 2000 {
		t.Errorf("bulk keys in the backup: %v, %v", resp, err)
	}
	for rev, v := range hist {
		resp, err := rc.Get(ctx, "/hist", clientv3.WithRev(rev))
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
			t.Errorf("/hist at revision %d: %v, %v; want %s", rev, resp, err, v)
		}
	}
}

// backup and restore refuse what would lose or mix data: an existing
// backup file, a PostgreSQL store, restoring over a store a server runs
// on or (without --force) over any existing store, and a file that is not
// a whole QuantyKube database.
func TestBackupRestoreRefusals(t *testing.T) {
	ctx := t.Context()
	x := framework.Start(t, framework.SQLite, framework.Options{})
	if _, err := x.Client(t).Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "b.db")
	var out bytes.Buffer
	if err := (BackupCommand{}).Run(ctx, []string{"--endpoint", x.DSN(), file}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	notDB := filepath.Join(dir, "not.db")
	if err := os.WriteFile(notDB, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		run        func() error
	}{
		{"backup to an existing file", "exists: give a new file", func() error {
			return BackupCommand{}.Run(ctx, []string{"--endpoint", x.DSN(), file}, &out, io.Discard)
		}},
		{"backup of PostgreSQL", "not a SQLite store", func() error {
			return BackupCommand{}.Run(ctx, []string{"--endpoint", "postgres://u:secret@127.0.0.1:1/db", filepath.Join(dir, "pg.db")}, &out, io.Discard)
		}},
		{"restore under a running server", "another QuantyKube server has this database open", func() error {
			return RestoreCommand{}.Run(ctx, []string{"--endpoint", x.DSN(), "--force", file}, &out, io.Discard)
		}},
		{"restore over a store without --force", "exists: stop its server", func() error {
			x.Stop(t)
			defer x.Start(t)
			return RestoreCommand{}.Run(ctx, []string{"--endpoint", x.DSN(), file}, &out, io.Discard)
		}},
		{"restore of a file that is not a database", "integrity check", func() error {
			return RestoreCommand{}.Run(ctx, []string{"--endpoint", filepath.Join(dir, "new.db"), notDB}, &out, io.Discard)
		}},
	}
	for _, c := range cases {
		if err := c.run(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if strings.Contains(fmt.Sprint(cases[1].run()), "secret") {
		t.Error("an error shows the database password")
	}
	if _, err := os.Stat(filepath.Join(dir, "new.db")); !os.IsNotExist(err) {
		t.Errorf("a refused restore left a database behind: %v", err)
	}
}

// pgTool is a PostgreSQL client tool: the one beside the test cluster's
// server binaries, else the one on PATH.
func pgTool(t *testing.T, name string) string {
	t.Helper()
	bin := os.Getenv(pgtest.EnvBin)
	if bin == "" {
		bin = pgtest.DefaultBin
	}
	if p := filepath.Join(bin, name); fileExists(p) {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		framework.Unavailable(t, "PostgreSQL client tools", err)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// docs/backup.md's PostgreSQL commands: pg_dump of a live store (one
// snapshot: the revision and the rows agree), pg_restore into another
// database, and QuantyKube serves it at the dumped revision, history
// included.
func TestPostgresBackupWithPgDump(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	x := framework.Start(t, framework.Postgres, framework.Options{})
	cli := x.Client(t)
	revs := map[int64]string{}
	for i := range 5 {
		resp, err := cli.Put(ctx, "/hist", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		revs[resp.Header.Revision] = fmt.Sprint(i)
	}
	if _, err := cli.Put(ctx, "/other", "o"); err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "quantykube.dump")
	run := func(bin string, args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
		}
	}
	// While the server runs.
	run(pgTool(t, "pg_dump"), "--format=custom", "--file="+dump, x.DSN())
	resp, err := cli.Get(ctx, "/other")
	if err != nil {
		t.Fatal(err)
	}
	dumped := resp.Header.Revision

	// The documented restore, literally: into an empty database, then a
	// server started on it.
	restored := framework.PostgresDatabase(t)
	run(pgTool(t, "pg_restore"), "--no-owner", "--dbname="+restored, dump)
	target := framework.Start(t, framework.Postgres, framework.Options{
		Config: func(c *endpoint.Config) { c.Endpoint = restored },
	})
	rc := target.Client(t)
	got, err := rc.Get(ctx, "/other")
	if err != nil || got.Header.Revision != dumped || len(got.Kvs) != 1 {
		t.Fatalf("restored: %v, %v; want the dumped revision %d", got, err, dumped)
	}
	for rev, v := range revs {
		got, err := rc.Get(ctx, "/hist", clientv3.WithRev(rev))
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != v {
			t.Errorf("/hist at %d: %v, %v; want %s", rev, got, err, v)
		}
	}
	// Writes carry on from the dumped revision.
	put, err := rc.Put(ctx, "/new", "n")
	if err != nil || put.Header.Revision != dumped+1 {
		t.Fatalf("a write after the restore: %v, %v", put, err)
	}
}
