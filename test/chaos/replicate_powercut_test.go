//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/lazyfs"
	lin "github.com/quantyroot/quantykube/test/linearizability"
)

// The power-cut drill's bounds: drillCuts cuts, the replicator stepping
// every drillCutInterval. A short interval keeps the bucket within a few
// revisions of the store at every cut, which is where a revision shipped
// before it was durable would show: the bucket past the store after the
// cut.
const (
	drillCuts         = 6
	drillCutInterval  = 50 * time.Millisecond
	drillCatchUpLimit = 30 * time.Second
	// The negative control replicates as often as it can, so that a cut
	// finds the bucket at the newest commit, and stops at the first cut
	// that shows what it must (at a 50 ms interval that took one to seven
	// cuts: a cut does not always take more than the bucket lags by).
	drillControlInterval = 10 * time.Millisecond
	drillControlCuts     = 20
)

// drillPowerCut runs serve --replicate with its store on lazyfs and its
// bucket on the test's own disk, and cuts the power under the recorder's
// load drillCuts times, restarting the server on what survived. After
// each cut the bucket must not be ahead of the durable store (the server
// would refuse the prefix at its start, ADR-044); at the end no
// acknowledged write is lost, the chain has no gap nor duplicate, and a
// restore of the latest equals the live store (check hash, history
// included).
func drillPowerCut(t *testing.T) row {
	fs, mnt, burl, x := drillOnLazyFS(t, drillCutInterval, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := filepath.Join(mnt, "state.db")
	first := drillFirstBase(t, ctx, burl)
	var extra, gaps []string
	lostPages, atEdge := 0, 0
	r, violations, lost := scenario(t, x, drillCuts, func(t *testing.T, round int, rec *lin.Recorder) {
		x.Kill(t)
		n, err := fs.PowerCut()
		if err != nil {
			t.Fatal(err)
		}
		lostPages += n
		if msg := integrity(t, mnt); msg != "ok" {
			extra = append(extra, fmt.Sprintf("after cut %d: PRAGMA integrity_check: %s", round, msg))
		}
		durable := drillDurableRev(t, mnt)
		c, _ := drillChain(drillRun(t, ctx, "replica", "ls", burl))
		t.Logf("cut %d: the store kept revision %d, the bucket's chain ends at %d", round, durable, c.last)
		gaps = append(gaps, strconv.FormatInt(durable-c.last, 10))
		if c.last == durable {
			atEdge++
		}
		if c.last > durable {
			t.Fatalf("after cut %d: the bucket holds revisions up to %d, past the %d the store kept: the replicator shipped a revision before it was durable (%d unsynced pages lost)", round, c.last, durable, n)
		}
		x.Start(t)
	})
	t.Logf("after each cut, the durable store was ahead of the bucket by %s revisions (%d cuts found them equal); %d unsynced pages lost", strings.Join(gaps, ", "), atEdge, lostPages)
	if lostPages == 0 {
		extra = append(extra, "no cut lost an unsynced page: the cuts tested nothing")
	}

	// The chain is exact: once the replicator has caught up, a restore
	// of the latest equals the live store, history included.
	cli := x.Client(t)
	head, err := cli.Get(ctx, lin.Prefix+"head")
	if err != nil {
		t.Fatal(err)
	}
	rev := head.Header.Revision
	var c chain
	for deadline := time.Now().Add(drillCatchUpLimit); ; time.Sleep(100 * time.Millisecond) {
		ls := drillRun(t, ctx, "replica", "ls", burl)
		var p []string
		c, p = drillChain(ls)
		if c.last >= rev {
			if len(p) > 0 {
				extra = append(extra, p...)
				t.Logf("replica ls:\n%s", ls)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket is at revision %d, %s after the load stopped at %d", c.last, drillCatchUpLimit, rev)
		}
	}
	if c.base != first {
		extra = append(extra, fmt.Sprintf("the chain begins at a base of revision %d, not at the first (%d): restarts lost what was restorable before them", c.base, first))
	}
	restored := filepath.Join(t.TempDir(), "restored", "state.db")
	// --keep-revision: check hash compares the revisions themselves.
	drillRun(t, ctx, "restore", "--from", burl, "--keep-revision", "--endpoint", "sqlite://"+restored)
	at := strconv.FormatInt(rev, 10)
	live := drillRun(t, ctx, "check", "hash", "--endpoint", "sqlite://"+db, "--revision", at, "--history-from", "0", "-o", "hex")
	back := drillRun(t, ctx, "check", "hash", "--endpoint", "sqlite://"+restored, "--revision", at, "--history-from", "0", "-o", "hex")
	if live != back {
		extra = append(extra, fmt.Sprintf("check hash at revision %d, history included: the live store's %s, the restore's %s", rev, strings.TrimSpace(live), strings.TrimSpace(back)))
	}
	t.Logf("bucket: %d base(s), %d segments, chain to revision %d; restore of the latest hashes as the live store at %d: %s", c.bases, c.segs, c.last, rev, strings.TrimSpace(live))
	r.violations += len(extra)
	r.note += fmt.Sprintf("; %d unsynced pages lost; bucket behind the durable store by %s revisions at the cuts; restore = live (check hash)", lostPages, strings.Join(gaps, "/"))
	return judge(t, r, append(violations, extra...), lost)
}

// drillOnLazyFS mounts lazyfs and starts serve --replicate on a store
// there, replicating every interval to a bucket on the test's own disk;
// env, when set, runs the chaos test binary's weak server instead of
// quantykube (main_test.go).
func drillOnLazyFS(t *testing.T, interval time.Duration, env []string) (*lazyfs.FS, string, string, *framework.Target) {
	if os.Geteuid() != 0 {
		framework.Unavailable(t, "FUSE", errors.New("mounting needs root"))
	}
	mnt := t.TempDir()
	fs, err := lazyfs.Mount(mnt)
	if err != nil {
		framework.Unavailable(t, "FUSE", err)
	}
	// Registered before the target's: runs after it has stopped.
	t.Cleanup(func() {
		if err := fs.Unmount(); err != nil {
			t.Errorf("unmounting lazyfs: %v", err)
		}
	})
	burl := "file://" + filepath.Join(t.TempDir(), "bucket")
	db := filepath.Join(mnt, "state.db")
	o := framework.Options{Process: true, Env: env,
		Args:     []string{"--replicate", burl, "--replicate-interval", interval.String()},
		Endpoint: func(string) string { return "sqlite://" + db }}
	if env != nil {
		bin, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		o.Bin = bin
	}
	return fs, mnt, burl, framework.Start(t, framework.SQLite, o)
}

// drillPowerCutControl is the negative control: the same with SQLite's
// synchronous=NORMAL, where a commit is visible before it is durable. A
// cut must find the bucket past the store (within drillControlCuts), and
// quantykube must then refuse to replicate the store to that prefix.
func drillPowerCutControl(t *testing.T) row {
	fs, mnt, burl, x := drillOnLazyFS(t, drillControlInterval, []string{weakSyncEnv + "=1"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rec, err := lin.Start(ctx, lin.Config{Endpoints: x.Endpoints(), Clients: clients, OpsPerClient: 1 << 30, Seed: uint64(time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Halt()
	var seen []string
	for round := 1; round <= drillControlCuts; round++ {
		waitAcked(t, rec, fmt.Sprintf("before cut %d", round))
		time.Sleep(time.Duration(200+rand.IntN(1000)) * time.Millisecond)
		x.Kill(t)
		if _, err := fs.PowerCut(); err != nil {
			t.Fatal(err)
		}
		durable := drillDurableRev(t, mnt)
		c, _ := drillChain(drillRun(t, ctx, "replica", "ls", burl))
		seen = append(seen, fmt.Sprintf("%d/%d", durable, c.last))
		if c.last <= durable {
			x.Start(t)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cctx, framework.Binary(t), "serve", "--listen-address", framework.FreeAddr(t),
			"--endpoint", "sqlite://"+filepath.Join(mnt, "state.db"), "--replicate", burl).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "past this store's") {
			t.Errorf("serve --replicate on a store behind its bucket: %v, want a refusal:\n%s", err, out)
		}
		t.Logf("negative control: cut %d left the store at revision %d and the bucket at %d, as it must; serve refuses the prefix: %s", round, durable, c.last, lastLine(string(out)))
		return row{rounds: round, note: fmt.Sprintf("the bucket past the store after cut %d (store %d, bucket %d), as it must", round, durable, c.last)}
	}
	t.Errorf("synchronous=NORMAL: in %d cuts the bucket was never past the store (store/bucket: %s): the drill cannot tell a revision shipped before it was durable", drillControlCuts, strings.Join(seen, ", "))
	return row{rounds: drillControlCuts}
}

// drillFirstBase waits for the first base in the bucket at url and
// returns its revision.
func drillFirstBase(t *testing.T, ctx context.Context, url string) int64 {
	t.Helper()
	for deadline := time.Now().Add(drillCatchUpLimit); ; time.Sleep(50 * time.Millisecond) {
		if c, _ := drillChain(drillRun(t, ctx, "replica", "ls", url)); c.bases > 0 {
			return c.base
		}
		if time.Now().After(deadline) {
			t.Fatalf("no base in %s %s after the start", url, drillCatchUpLimit)
		}
	}
}

// drillDurableRev is the revision of the store the cut left in dir (the
// server is down), read from a copy of its files, as the next start will
// recover it.
func drillDurableRev(t *testing.T, dir string) int64 {
	t.Helper()
	cp := t.TempDir()
	for _, name := range []string{"state.db", "state.db-wal"} {
		if err := copyFile(filepath.Join(dir, name), filepath.Join(cp, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	d, err := sql.Open("sqlite", "file:"+filepath.Join(cp, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var rev int64
	if err := d.QueryRow(`SELECT value FROM meta WHERE name = 'rev'`).Scan(&rev); err != nil {
		t.Fatalf("the store's revision after the cut: %v", err)
	}
	return rev
}
