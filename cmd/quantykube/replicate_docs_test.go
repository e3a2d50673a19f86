package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// markedBlocks are the marked sh blocks (framework.DocBlocks) of
// section in page, from the module root.
func markedBlocks(t *testing.T, page, section string) []framework.DocBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(b), "\n"+section+"\n")
	if !ok {
		t.Fatalf("%s has no %s", page, section)
	}
	text, _, _ = strings.Cut(text, "\n## ")
	blocks, err := framework.DocBlocks(page+", "+section, text)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// docBucket is the bucket docs/backup.md's replication commands name.
const docBucket = "s3://my-bucket/clusters/prod?endpoint=https://s3.example.com&region=eu-west-1&force-path-style=true"

// docs/backup.md's replication commands, as they are written, with bash
// and the built binary first on PATH: the host's paths replaced by the
// test's (/var/lib/quantykube, /run/quantykube), the S3 bucket by a
// file:// one in a directory of the test's own, and the example time and
// revision of the restores by a time and a revision of the test's own
// writes (the example's are of no store here). `serve` runs while a client
// writes on its socket, then stops on SIGTERM; each command exits 0, `replica
// ls` lists a base and segments, and each restore leaves the store at the
// state the original served at the point asked for, revision included.
func TestReplicationDocCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	blocks := markedBlocks(t, "docs/backup.md", "## Replication to object storage (SQLite)")
	var markers []string
	for _, b := range blocks {
		markers = append(markers, b.Marker)
	}
	want := []string{"<!-- test: serve -->", "<!-- test: run -->", "<!-- test: run -->", "<!-- test: run -->", "<!-- test: run -->"}
	if strings.Join(markers, "\n") != strings.Join(want, "\n") {
		t.Fatalf("docs/backup.md's replication section marks %q, want serve, replica ls, then the three restores", markers)
	}
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	lib, run, bdir := filepath.Join(work, "lib"), filepath.Join(work, "run"), filepath.Join(work, "bucket")
	for _, d := range []string{bin, lib, run} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(framework.Binary(t), filepath.Join(bin, "quantykube")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	paths := []string{"/var/lib/quantykube", lib, "/run/quantykube", run, docBucket, "file://" + bdir}
	command := func(block framework.DocBlock, replace ...string) *exec.Cmd {
		text := strings.NewReplacer(append(paths, replace...)...).Replace(block.Text)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", text)
		cmd.Dir, cmd.Env = work, env
		return cmd
	}
	mustRun := func(i int, block framework.DocBlock, replace ...string) string {
		t.Helper()
		cmd := command(block, replace...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("block %d:\n%s\nfailed: %v\n%s", i+1, cmd.Args[len(cmd.Args)-1], err, out.String())
		}
		t.Logf("block %d (%s):\n%s%s", i+1, time.Since(start).Round(time.Millisecond), cmd.Args[len(cmd.Args)-1], out.String())
		return out.String()
	}

	// serve --replicate, written to through its socket, then stopped as
	// systemd stops it: a graceful stop ships a last segment.
	srv := command(blocks[0])
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			_ = srv.Wait()
		}
	}()
	sock := filepath.Join(run, "quantykube.sock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket %s after 30 s:\n%s", sock, srvOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + sock}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The first base is taken once the server serves: writes before it
	// are in it, and no restore reaches a revision before it. The writes
	// below begin after it, so that --at and --revision name revisions
	// the segments hold.
	for deadline := time.Now().Add(30 * time.Second); ; {
		bases, _ := filepath.Glob(filepath.Join(bdir, "*", "bases", "*"))
		if len(bases) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the documented serve shipped no base in 30 s\n%s", srvOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var revs []int64
	var at time.Time // between the writes of revs[11] and revs[12]
	for i := range 20 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/doc/%02d", i%7), fmt.Sprintf("v%d", i))
		if err != nil {
			t.Fatalf("put through the documented server: %v\n%s", err, srvOut.String())
		}
		revs = append(revs, resp.Header.Revision)
		if i == 11 {
			// Commit times are in milliseconds: keep the writes out of
			// the time's millisecond.
			time.Sleep(2 * time.Millisecond)
			at = time.Now().UTC()
			time.Sleep(2 * time.Millisecond)
		}
	}
	atRev, atRevision := revs[11], revs[5]
	wantAt := map[int64]string{}
	for _, rev := range []int64{atRev, atRevision, revs[len(revs)-1]} {
		_, wantAt[rev] = docState(ctx, t, cli, rev)
	}
	cli.Close()
	if err := syscall.Kill(-srv.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = srv.Wait()
	stopped = true
	if err != nil {
		t.Fatalf("the documented serve, stopped with SIGTERM: %v\n%s", err, srvOut.String())
	}

	ls := mustRun(1, blocks[1])
	if !strings.HasPrefix(ls, "lineage ") || !strings.Contains(ls, "\nbase ") || !strings.Contains(ls, "\nsegment ") {
		t.Fatalf("replica ls lists no lineage, base and segment:\n%s", ls)
	}
	store := filepath.Join(lib, "state.db")
	// check serves the restored store: it holds the original's keys at
	// rev, and its revision is moved a billion past the bucket's last
	// (the original's last: it stopped gracefully) or, over a store at a
	// later revision (the restores before it), past that store's
	// (ADR-027).
	replaced, last := int64(0), revs[len(revs)-1]
	check := func(what, out string, rev int64) {
		t.Helper()
		if !strings.Contains(out, fmt.Sprintf(" at revision %d (", rev)) {
			t.Errorf("restore %s says\n%s\nwant revision %d", what, out, rev)
		}
		s, err := endpoint.Start(ctx, endpoint.Config{Listener: "127.0.0.1:0", Endpoint: "sqlite://" + store})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, keys := docState(ctx, t, c, 0)
		if keys != wantAt[rev] {
			t.Fatalf("restored %s:\n%s\nwant the original's keys at revision %d:\n%s", what, keys, rev, wantAt[rev])
		}
		if want := max(replaced, last) + mvcc.RevisionBump; got != want {
			t.Fatalf("restored %s over a store at revision %d: revision %d, want %d", what, replaced, got, want)
		}
		replaced = got
	}
	check("the latest", mustRun(2, blocks[2]), revs[len(revs)-1])
	check("at "+at.Format(time.RFC3339Nano), mustRun(3, blocks[3], "2026-12-07T14:03:05.250Z", at.Format("2006-01-02T15:04:05.000Z07:00")), atRev)
	check(fmt.Sprintf("at revision %d", atRevision), mustRun(4, blocks[4], "123456", strconv.FormatInt(atRevision, 10)), atRevision)
}

// docState is every key at rev (0: the latest), and the revision of the
// store's header.
func docState(ctx context.Context, t *testing.T, c *clientv3.Client, rev int64) (int64, string) {
	t.Helper()
	r, err := c.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for _, kv := range r.Kvs {
		s += fmt.Sprintf("%q=%q c%d m%d v%d l%x\n", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return r.Header.Revision, s
}
