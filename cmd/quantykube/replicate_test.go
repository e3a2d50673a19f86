package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// The lost-machine drill: `quantykube serve --replicate` under write load
// is killed with SIGKILL, its data directory deleted, and the store
// restored from the bucket with `restore --from`. Every write acknowledged
// more than the RPO (the interval, plus one PUT's time) before the kill is
// there with its revision and value; nothing else is there but writes the
// clients sent.
func TestReplicateLostMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	bdir := filepath.Join(t.TempDir(), "bucket")
	const interval = time.Second
	x := framework.Start(t, framework.SQLite, framework.Options{Process: true,
		Args: []string{"--replicate", "file://" + bdir, "--replicate-interval", interval.String()}})
	cli := x.Client(t)

	type write struct {
		value string
		rev   int64
		acked time.Time
	}
	const writers, maxWrites = 3, 5000
	var mu sync.Mutex
	sent := map[string]write{} // key -> its one write
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range maxWrites {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("/drill/%d/%05d", w, i), fmt.Sprintf("v%d.%d", w, i)
				mu.Lock()
				sent[k] = write{value: v}
				mu.Unlock()
				resp, err := cli.Put(ctx, k, v)
				if err != nil {
					return // the kill
				}
				mu.Lock()
				sent[k] = write{value: v, rev: resp.Header.Revision, acked: time.Now()}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(3 * time.Second)
	killed := time.Now()
	x.Kill(t)
	close(stop)
	wg.Wait()
	path := strings.TrimPrefix(x.DSN(), "sqlite://")
	if err := os.RemoveAll(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}

	var ls bytes.Buffer
	if err := (ReplicaCommand{}).Run(ctx, []string{"ls", "file://" + bdir}, &ls, io.Discard); err != nil {
		t.Fatalf("replica ls: %v", err)
	}
	if lines := strings.Split(ls.String(), "\n"); len(lines) < 4 || !strings.HasPrefix(lines[0], "lineage ") || !strings.HasPrefix(lines[2], "base ") || !strings.HasPrefix(lines[3], "segment ") {
		t.Fatalf("replica ls:\n%s", ls.String())
	}
	t.Logf("replica ls:\n%s", ls.String())

	var out, errb bytes.Buffer
	start := time.Now()
	err := RestoreCommand{}.Run(ctx, []string{"--from", "file://" + bdir, "--endpoint", x.DSN()}, &out, &errb)
	if err != nil {
		t.Fatalf("restore --from: %v\n%s", err, errb.String())
	}
	t.Logf("restored in %s:\n%s", time.Since(start).Round(time.Millisecond), out.String())

	srv, err := endpoint.Start(ctx, endpoint.Config{Listener: "127.0.0.1:0", Endpoint: x.DSN()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rc, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	resp, err := rc.Get(ctx, "/drill/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, kv := range resp.Kvs {
		w, ok := sent[string(kv.Key)]
		switch {
		case !ok || w.value != string(kv.Value):
			t.Errorf("restored %s=%q, which no client wrote", kv.Key, kv.Value)
		case w.rev != 0 && w.rev != kv.ModRevision:
			t.Errorf("restored %s at revision %d, acknowledged at %d", kv.Key, kv.ModRevision, w.rev)
		}
		got[string(kv.Key)] = kv.ModRevision
	}
	rpo := interval + 250*time.Millisecond
	old, lost := 0, 0
	for k, w := range sent {
		if w.rev == 0 || killed.Sub(w.acked) <= rpo {
			continue
		}
		old++
		if _, ok := got[k]; !ok {
			lost++
			if lost <= 5 {
				t.Errorf("%s, acknowledged at revision %d %s before the kill, is not restored", k, w.rev, killed.Sub(w.acked).Round(time.Millisecond))
			}
		}
	}
	if old == 0 {
		t.Fatal("no write was acknowledged before the RPO: the drill proved nothing")
	}
	t.Logf("%d writes sent, %d restored, %d acknowledged more than %s before the kill, %d of them lost", len(sent), len(got), old, rpo, lost)

	// The revision moved a billion past the bucket's last, past every
	// revision the lost store handed out, and marked compacted: a watcher
	// of the lost store (at its newest acknowledged revision) is cancelled
	// and relists; the next write goes on from the bump.
	var newest, restored int64
	for _, w := range sent {
		newest = max(newest, w.rev)
	}
	for _, r := range got {
		restored = max(restored, r)
	}
	if !strings.Contains(out.String(), "bumped    to revision") {
		t.Errorf("restore --from's output says nothing of the bump:\n%s", out.String())
	}
	bumped := resp.Header.Revision
	if bumped < restored+mvcc.RevisionBump || bumped <= newest || bumped > newest+mvcc.RevisionBump {
		t.Fatalf("restored store at revision %d: want a billion past the bucket's last (restored keys up to %d, acknowledged up to %d)", bumped, restored, newest)
	}
	wch := rc.Watch(ctx, "/drill/", clientv3.WithPrefix(), clientv3.WithRev(newest))
	select {
	case wr := <-wch:
		if !wr.Canceled || wr.CompactRevision != bumped {
			t.Errorf("watch from revision %d, acknowledged by the lost store: %+v, want it cancelled as compacted at %d", newest, wr, bumped)
		}
	case <-ctx.Done():
		t.Fatal("watch from a lost revision: no answer")
	}
	if pr, err := rc.Put(ctx, "/drill/after", "x"); err != nil || pr.Header.Revision != bumped+1 {
		t.Fatalf("write after the restore: %v, %v; want revision %d", pr, err, bumped+1)
	}
	var keepOut bytes.Buffer
	kept := "sqlite://" + filepath.Join(t.TempDir(), "kept.db")
	if err := (RestoreCommand{}).Run(ctx, []string{"--from", "file://" + bdir, "--keep-revision", "--endpoint", kept}, &keepOut, io.Discard); err != nil {
		t.Fatalf("restore --from --keep-revision: %v", err)
	}
	if !strings.Contains(keepOut.String(), fmt.Sprintf("revision  %d\n", bumped-mvcc.RevisionBump)) || !strings.Contains(keepOut.String(), "kept (--keep-revision)") {
		t.Errorf("restore --from --keep-revision, want revision %d kept:\n%s", bumped-mvcc.RevisionBump, keepOut.String())
	}
}

// restore --from and replica refuse bad arguments before they touch a
// store or a bucket.
func TestRestoreFromBadArguments(t *testing.T) {
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "s.db")
	for _, c := range []struct {
		cmd  Command
		args []string
		want string
	}{
		{RestoreCommand{}, []string{"--from", "file://" + dir, "--at", "2026-12-07 14:03", "--endpoint", store}, "want RFC 3339 with milliseconds"},
		{RestoreCommand{}, []string{"--from", "file://" + dir, "--at", "2026-12-07T14:03:05.250Z", "--revision", "5", "--endpoint", store}, "not both"},
		{RestoreCommand{}, []string{"--from", "file://" + dir, "backup.db", "--endpoint", store}, "takes no FILE"},
		{RestoreCommand{}, []string{"backup.db", "--revision", "5", "--endpoint", store}, "need --from"},
		{RestoreCommand{}, []string{"--from", "ftp://x/y", "--endpoint", store}, "ftp"},
		{RestoreCommand{}, []string{"--from", "file://" + dir, "--endpoint", "postgres://u@127.0.0.1:1/db"}, "not a SQLite store"},
		{ServeCommand{}, []string{"--replicate", "file://" + dir, "--endpoint", "postgres://u@127.0.0.1:1/db", "--listen-address", "127.0.0.1:0"}, "serves SQLite (ADR-052)"},
		{ServeCommand{}, []string{"--replicate", "file://" + dir, "--endpoint", "mysql://u@tcp(127.0.0.1:1)/db", "--listen-address", "127.0.0.1:0"}, "serves SQLite (ADR-052)"},
		{ReplicaCommand{}, []string{"list", "file://" + dir}, "want 'ls URL'"},
	} {
		err := c.cmd.Run(t.Context(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%T %q: %v, want an error saying %q", c.cmd, c.args, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("bad arguments left %d files behind", len(entries))
	}
}
