package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The restore figure (issue 54): how long `quantykube restore --from` takes
// to rebuild a store of -replicate-restore-revisions revisions from a
// file:// bucket, beside a local `restore FILE` of a `backup` of the same
// store. The store and its bucket are built once and cached (the fill
// takes minutes): a server with `--retain 0 --replicate file://BUCKET`
// starts on an empty store, so its base is taken at the start, then the
// fill's Puts are shipped as one segment a second, as a store replicated
// since its last daily base would have them at the end of its day (the
// most a restore replays with the default --replicate-base-interval). The
// values are base64 of random bytes, so that gzip flatters no object.

// restoreFill records what a cached restore store and its bucket hold.
type restoreFill struct {
	Revisions   int64   `json:"revisions"`
	StoreBytes  int64   `json:"store_bytes"`
	BackupBytes int64   `json:"backup_bytes"`
	BucketBytes int64   `json:"bucket_bytes"`
	Bases       int     `json:"bases"`
	Segments    int     `json:"segments"`
	FillSeconds float64 `json:"fill_seconds"`
}

// randomValue is n bytes of base64 of random bytes.
func randomValue(r *rand.Rand, n int) string {
	raw := make([]byte, n*3/4+3)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)[:n]
}

// prepareRestoreData returns the cached directory holding store/state.db,
// its replica in bucket/ and its backup in backup.db, filling them with
// bin the first time.
func prepareRestoreData(ctx context.Context, bin, cacheDir string, cfg config, revs int) (string, restoreFill, error) {
	dir := filepath.Join(cacheDir, fmt.Sprintf("replicate-restore-%d-%db", revs, cfg.valueSize))
	meta := filepath.Join(dir, "fill.json")
	var rf restoreFill
	if b, err := os.ReadFile(meta); err == nil {
		if err := json.Unmarshal(b, &rf); err != nil {
			return "", rf, fmt.Errorf("%s: %w", meta, err)
		}
		logf("restore: reusing %s (%d revisions)", dir, rf.Revisions)
		return dir, rf, nil
	}
	os.RemoveAll(dir)
	store, bucket := filepath.Join(dir, "store"), filepath.Join(dir, "bucket")
	for _, d := range []string{store, bucket} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", rf, err
		}
	}
	srv, err := startGrowthServer(ctx, bin, store, "--retain", "0", "--replicate", "file://"+bucket)
	if err != nil {
		return "", rf, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.stop()
		}
	}()
	logf("restore: filling %s to %d revisions, replicated to %s (once; later runs reuse it)", dir, revs, bucket)
	t0 := time.Now()
	seed := uint64(time.Now().UnixNano())
	st := drive(ctx, srv.conns, 64, revs, 4*time.Hour, cfg.reqTimeout, func(ctx context.Context, c *clientv3.Client, j int) error {
		r := rand.New(rand.NewPCG(seed, uint64(j)))
		k := growthObj(j * growthStride)
		if j%11 == 0 {
			k = fmt.Sprintf("%sk%06d", growthListPrefix, j%500)
		}
		_, err := c.Put(ctx, k, randomValue(r, cfg.valueSize))
		return err
	})
	if st.errs > 0 || st.ops != revs {
		return "", rf, fmt.Errorf("restore fill: %d of %d puts done, %d errors (%s)", st.ops, revs, st.errs, st.firstErr)
	}
	rf.FillSeconds = time.Since(t0).Seconds()
	cctx, cancel := context.WithTimeout(ctx, cfg.reqTimeout)
	r, err := srv.conns[0].Get(cctx, growthHot)
	cancel()
	if err != nil {
		return "", rf, err
	}
	rf.Revisions = r.Header.Revision
	// A graceful stop ships the last segment.
	srv.stop()
	stopped = true
	logf("restore: filled %d revisions in %.0f s", rf.Revisions, rf.FillSeconds)
	backup := filepath.Join(dir, "backup.db")
	if out, err := exec.CommandContext(ctx, bin, "backup", "--endpoint", "sqlite://"+filepath.Join(store, "state.db"), backup).CombinedOutput(); err != nil {
		return "", rf, fmt.Errorf("quantykube backup: %w: %s", err, out)
	}
	rf.StoreBytes, rf.BackupBytes, rf.BucketBytes = dirSize(store), fileSize(backup), dirSize(bucket)
	if rf.Bases, rf.Segments, err = countObjects(bucket); err != nil {
		return "", rf, err
	}
	b, err := json.Marshal(rf)
	if err != nil {
		return "", rf, err
	}
	return dir, rf, os.WriteFile(meta, b, 0o644)
}

func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

// countObjects counts a file:// bucket's bases and segments.
func countObjects(bucket string) (bases, segments int, err error) {
	err = filepath.WalkDir(bucket, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		switch {
		case strings.HasSuffix(path, ".db.gz"):
			bases++
		case strings.HasSuffix(path, ".seg.gz"):
			segments++
		}
		return nil
	})
	if err == nil && bases == 0 {
		err = fmt.Errorf("%s: no base", bucket)
	}
	return bases, segments, err
}

// restoreRun is one timed restore.
type restoreRun struct {
	name    string
	seconds float64
	rss     int64 // peak, from the process's rusage
	bytes   int64 // the restored store's
	rev     int64 // the revision restore reports
}

var restoredRev = regexp.MustCompile(`(?m)^\s+revision\s+(\d+)$`)

// timeRestore runs `quantykube restore ARGS --endpoint sqlite://DIR/state.db`
// into an empty dir and checks the revision it reports.
func timeRestore(ctx context.Context, bin, dir, name string, want int64, args ...string) (restoreRun, error) {
	run := restoreRun{name: name}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return run, err
	}
	defer os.RemoveAll(dir)
	db := filepath.Join(dir, "state.db")
	cmd := exec.CommandContext(ctx, bin, append([]string{"restore", "--endpoint", "sqlite://" + db}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	run.seconds = time.Since(t0).Seconds()
	if err != nil {
		return run, fmt.Errorf("restore %s: %w: %s", name, err, out.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.rss = ru.Maxrss << 10
	}
	run.bytes = dirSize(dir)
	m := restoredRev.FindStringSubmatch(out.String())
	if m == nil {
		return run, fmt.Errorf("restore %s: no revision in its output: %s", name, out.String())
	}
	run.rev, _ = strconv.ParseInt(m[1], 10, 64)
	if run.rev != want {
		return run, fmt.Errorf("restore %s: revision %d, want %d", name, run.rev, want)
	}
	return run, nil
}

// runReplicateRestore times each restore rounds times, in turn.
func runReplicateRestore(ctx context.Context, qkBin, cacheDir, workDir string, cfg config, revs, rounds int) error {
	dir, rf, err := prepareRestoreData(ctx, qkBin, cacheDir, cfg, revs)
	if err != nil {
		return err
	}
	bucket := "file://" + filepath.Join(dir, "bucket")
	mid := rf.Revisions / 2
	target := filepath.Join(workDir, "restore")
	kinds := []struct {
		name string
		rev  int64
		args []string
	}{
		{"restore FILE (a backup)", rf.Revisions, []string{filepath.Join(dir, "backup.db")}},
		{"restore --from, the latest", rf.Revisions, []string{"--from", bucket}},
		{fmt.Sprintf("restore --from --revision %d (the middle)", mid), mid, []string{"--from", bucket, "--revision", strconv.FormatInt(mid, 10)}},
	}
	best := make([]restoreRun, len(kinds))
	loads := make([]string, 0, rounds)
	for round := 1; round <= rounds; round++ {
		loads = append(loads, loadAvg())
		for _, i := range roundOrder(len(kinds), round) {
			k := kinds[i]
			run, err := timeRestore(ctx, qkBin, target, k.name, k.rev, k.args...)
			if err != nil {
				return err
			}
			logf("restore: round %d: %s: %.1f s, peak RSS %s, %s restored (load %s)", round, k.name, run.seconds, fmtMB(run.rss), fmtMB(run.bytes), loadAvg())
			if best[i].seconds == 0 || run.seconds < best[i].seconds {
				best[i] = run
			}
		}
	}
	fmt.Printf("\n### replicate-restore: a store of %d revisions of %d random bytes (%s; its backup %s), replicated to a file:// bucket from its start (%d base at the start, %d segments, %s), the best of %d rounds, load %s\n\n",
		rf.Revisions, cfg.valueSize, fmtMB(rf.StoreBytes), fmtMB(rf.BackupBytes), rf.Bases, rf.Segments, fmtMB(rf.BucketBytes), rounds, strings.Join(loads, "; "))
	fmt.Println("| restore | revision | seconds | restored store | MB/s (restored store) | peak RSS |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, r := range best {
		fmt.Printf("| %s | %d | %.1f s | %s | %.0f | %s |\n", r.name, r.rev, r.seconds, fmtMB(r.bytes), float64(r.bytes)/(1<<20)/r.seconds, fmtMB(r.rss))
	}
	if best[0].seconds > 0 {
		fmt.Printf("\nrestore --from the latest takes %.1fx a local restore FILE.\n", best[1].seconds/best[0].seconds)
	}
	return nil
}
