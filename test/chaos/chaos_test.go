//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	_ "modernc.org/sqlite" // PRAGMA integrity_check on the database files

	"github.com/quantyroot/quantykube/proto/historypb"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/lazyfs"
	lin "github.com/quantyroot/quantykube/test/linearizability"
)

// row is a scenario's line in the table.
type row struct {
	scenario   string
	rounds     int
	ops        int
	lost       int
	violations int
	took       time.Duration
	note       string
}

// TestChaos runs every scenario in turn (they share the machine's two
// cores and the PostgreSQL cluster, which two of them stop) and prints
// the table.
func TestChaos(t *testing.T) {
	var rows []row
	t.Cleanup(func() { report(t, rows) })
	for _, sc := range []struct {
		name string
		run  func(t *testing.T) row
	}{
		{"power cut, SQLite", func(t *testing.T) row { return powerCut(t, 20, false) }},
		// The WAL as SQLite writes it, without the gathering VFS (ADR-018):
		// the switch operators fall back to must hold as well.
		{"power cut, SQLite --sqlite-plain-wal", func(t *testing.T) row { return powerCut(t, 10, false, "--sqlite-plain-wal") }},
		// Ten cuts for the control: a cut loses an acknowledged write of a
		// store that does not sync only when the pages it drops hold one,
		// and three cuts (2 s each) showed no loss in one CI run of five.
		{"power cut, SQLite synchronous=NORMAL (negative control)", func(t *testing.T) row { return powerCut(t, 10, true) }},
		{"kill -9, SQLite", killSQLite},
		{"kill -9 of one of two replicas, PostgreSQL", func(t *testing.T) row { return killReplica(t, framework.Postgres) }},
		{"PostgreSQL stopped hard and restarted, two replicas", postgresRestart},
		{"kill -9 of one of two replicas, MariaDB", func(t *testing.T) row { return killReplica(t, framework.MySQL) }},
		{"MariaDB killed and restarted, two replicas", mariadbRestart},
		{"PostgreSQL failover to a synchronous standby, two replicas", syncFailover},
		{"disk full, SQLite", diskFull},
		{"PostgreSQL connections reset mid-batch, two replicas", connectionCut},
	} {
		t.Run(sc.name, func(t *testing.T) {
			start := time.Now()
			r := sc.run(t)
			r.scenario, r.took = sc.name, time.Since(start)
			rows = append(rows, r)
		})
	}
}

// clients and load bound every scenario's workload: six clients, each
// round of load a random 0.2 to 1.2 s after at least minAcked writes were
// acknowledged since the last fault.
const (
	clients  = 6
	minAcked = 25
)

// scenario runs the recorder on x through rounds of inject, then checks the
// history and the durability of every acknowledged write. It returns the
// row, the violations and the lost writes; the caller judges them.
func scenario(t *testing.T, x *framework.Target, rounds int, inject func(t *testing.T, round int, rec *lin.Recorder)) (row, []string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	begin := time.Now()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	rec, err := lin.Start(ctx, lin.Config{Endpoints: x.Endpoints(), TLS: x.ClientTLS(), Clients: clients, OpsPerClient: 1 << 30, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= rounds; round++ {
		waitAcked(t, rec, fmt.Sprintf("before fault %d", round))
		time.Sleep(time.Duration(200+rng.IntN(1000)) * time.Millisecond)
		inject(t, round, rec)
	}
	waitAcked(t, rec, "after the last fault")
	faulted := time.Now()
	h, err := rec.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	rep := lin.Check(h)
	cli, err := framework.NewTLSClient(x.ClientTLS(), x.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	checked := time.Now()
	nLost, lost, err := lin.Lost(ctx, cli, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rounds %v, stopping %v, checks %v, durability %v", faulted.Sub(begin).Round(time.Millisecond), stopped.Sub(faulted).Round(time.Millisecond),
		checked.Sub(stopped).Round(time.Millisecond), time.Since(checked).Round(time.Millisecond))
	t.Logf("seed %d: %d operations checked (%d acknowledged writes, %d unknown outcomes, %d of them shown by the watch to have taken effect), %d watch events to revision %d; porcupine %v",
		seed, rep.Ops, rep.Acked, rep.Unknown, rep.Resolved, rep.Events, h.Final, rep.CheckTime.Round(time.Millisecond))
	return row{rounds: rounds, ops: rep.Ops, lost: nLost, violations: len(rep.Violations),
		note: fmt.Sprintf("%d unknown outcomes", rep.Unknown)}, rep.Violations, lost
}

// waitAcked waits until minAcked more writes have been acknowledged: the
// load is on, or has resumed after a fault.
func waitAcked(t *testing.T, rec *lin.Recorder, when string) {
	t.Helper()
	from := rec.Acked()
	deadline := time.Now().Add(time.Minute)
	for rec.Acked() < from+minAcked {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d writes acknowledged in a minute: writing did not resume", when, rec.Acked()-from)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// judge fails t on any violation or lost write.
func judge(t *testing.T, r row, violations, lost []string) row {
	t.Helper()
	for i, v := range append(lost, violations...) {
		if i == 30 {
			t.Errorf("... and %d more", len(lost)+len(violations)-i)
			break
		}
		t.Errorf("%s", v)
	}
	return r
}

// powerCut runs QuantyKube on SQLite on a lazyfs mount and cuts the power
// under load rounds times: SIGKILL, then everything not fsynced is gone.
// After each cut the database files pass PRAGMA integrity_check; at the
// end History's log is the watch's stream. weak is the negative control;
// args are extra serve flags.
func powerCut(t *testing.T, rounds int, weak bool, args ...string) row {
	mnt := t.TempDir()
	if os.Geteuid() != 0 {
		framework.Unavailable(t, "FUSE", errors.New("mounting needs root"))
	}
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
	db := filepath.Join(mnt, "state.db")
	o := framework.Options{Process: true, Args: args, Endpoint: func(string) string { return "sqlite://" + db }}
	if weak {
		bin, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		o.Bin, o.Env = bin, []string{weakSyncEnv + "=1"}
	}
	x := framework.Start(t, framework.SQLite, o)
	var extra []string
	lostPages := 0
	r, violations, lost := scenario(t, x, rounds, func(t *testing.T, round int, rec *lin.Recorder) {
		x.Kill(t)
		n, err := fs.PowerCut()
		if err != nil {
			t.Fatal(err)
		}
		lostPages += n
		if msg := integrity(t, mnt); msg != "ok" {
			extra = append(extra, fmt.Sprintf("after cut %d: PRAGMA integrity_check: %s", round, msg))
		}
		x.Start(t)
	})
	if !weak {
		extra = append(extra, historyLogIsWatch(t, x)...)
	}
	r.violations += len(extra)
	violations = append(violations, extra...)
	s := fs.Stats()
	r.note += fmt.Sprintf("; %d fsyncs, %d unsynced pages lost", s.Syncs, lostPages)
	if weak {
		// The control must fail: a store that does not sync its commits
		// loses acknowledged writes at a power cut, and this test sees it.
		if r.lost == 0 {
			t.Errorf("synchronous=NORMAL lost no acknowledged write in %d power cuts (%d unsynced pages lost): the test cannot tell a missing fsync", rounds, lostPages)
		}
		t.Logf("negative control: %d acknowledged writes lost, %d violations, as it must; first: %s", r.lost, r.violations, first(lost, violations))
		return r
	}
	if lostPages == 0 {
		t.Errorf("no cut lost an unsynced page: the cuts tested nothing")
	}
	return judge(t, r, violations, lost)
}

func first(lists ...[]string) string {
	for _, l := range lists {
		if len(l) > 0 {
			return l[0]
		}
	}
	return "none"
}

// integrity copies the durable database files out of dir (the server is
// down) and runs PRAGMA integrity_check on the copy, which recovers the
// WAL as the server's next start will, without changing the original.
func integrity(t *testing.T, dir string) string {
	t.Helper()
	cp := t.TempDir()
	for _, name := range []string{"state.db", "state.db-wal"} {
		if err := copyFile(filepath.Join(dir, name), filepath.Join(cp, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(cp, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var msg string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&msg); err != nil {
		return err.Error()
	}
	return msg
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// historyLogIsWatch reads History's whole log of the workload's keys and
// compares it with a fresh watch from the first revision: the same
// changes, revision for revision, with no revision missing.
func historyLogIsWatch(t *testing.T, x *framework.Target) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := framework.NewTLSClient(x.ClientTLS(), x.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	head, err := cli.Get(ctx, lin.Prefix+"head")
	if err != nil {
		t.Fatal(err)
	}
	rev := head.Header.Revision
	var logged []string
	hc := historypb.NewHistoryClient(cli.ActiveConnection())
	req := &historypb.Request{Key: []byte(lin.Prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(lin.Prefix)), Limit: 5000}
	for {
		page, err := hc.Log(ctx, req)
		if err != nil {
			t.Fatalf("History.Log: %v", err)
		}
		for _, e := range page.Entries {
			logged = append(logged, change(e.Revision, e.Deleted == 1, string(e.Kv.Key), string(e.Kv.Value)))
		}
		if page.Continue == "" {
			break
		}
		req.Continue = page.Continue
	}
	var watched []string
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := cli.Watch(wctx, lin.Prefix, clientv3.WithPrefix(), clientv3.WithRev(1))
	for last := int64(0); last < rev; {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				t.Fatalf("watch from revision 1 ended: %v", wr.Err())
			}
			for _, ev := range wr.Events {
				watched = append(watched, change(ev.Kv.ModRevision, ev.Type == clientv3.EventTypeDelete, string(ev.Kv.Key), string(ev.Kv.Value)))
				last = ev.Kv.ModRevision
			}
		case <-ctx.Done():
			t.Fatalf("watch from revision 1: no event at %d", rev)
		}
	}
	var out []string
	for i := range max(len(logged), len(watched)) {
		if i >= len(logged) || i >= len(watched) || logged[i] != watched[i] {
			a, b := "nothing", "nothing"
			if i < len(logged) {
				a = logged[i]
			}
			if i < len(watched) {
				b = watched[i]
			}
			out = append(out, fmt.Sprintf("History's log and the watch differ at change %d: log %s, watch %s", i, a, b))
			break
		}
	}
	t.Logf("History's log: %d changes to revision %d, as the watch", len(logged), rev)
	return out
}

func change(rev int64, deleted bool, key, value string) string {
	if deleted {
		return fmt.Sprintf("%d DELETE %s", rev, key)
	}
	return fmt.Sprintf("%d PUT %s=%s", rev, key, value)
}

func killSQLite(t *testing.T) row {
	x := framework.Start(t, framework.SQLite, framework.Options{Process: true})
	r, violations, lost := scenario(t, x, 5, func(t *testing.T, round int, rec *lin.Recorder) {
		x.Kill(t)
		x.Start(t)
	})
	return judge(t, r, violations, lost)
}

// killReplica kills either of two replicas on b's database in turn.
func killReplica(t *testing.T, b framework.Backend) row {
	x := framework.Start(t, b, framework.Options{Process: true, Replicas: 2})
	r, violations, lost := scenario(t, x, 4, func(t *testing.T, round int, rec *lin.Recorder) {
		i := round % 2
		x.KillReplica(t, i)
		x.StartReplica(t, i)
	})
	return judge(t, r, violations, lost)
}

func postgresRestart(t *testing.T) row {
	cluster := framework.PostgresCluster(t)
	x := framework.Start(t, framework.Postgres, framework.Options{Process: true, Replicas: 2})
	r, violations, lost := scenario(t, x, 3, func(t *testing.T, round int, rec *lin.Recorder) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cluster.Stop(ctx, "immediate"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := cluster.Start(ctx); err != nil {
			t.Fatal(err)
		}
	})
	return judge(t, r, violations, lost)
}

// mariadbRestart kills MariaDB (SIGKILL: InnoDB recovers from its redo
// log at the next start) under two replicas' load and starts it again.
func mariadbRestart(t *testing.T) row {
	in := framework.MySQLInstance(t)
	x := framework.Start(t, framework.MySQL, framework.Options{Process: true, Replicas: 2})
	r, violations, lost := scenario(t, x, 3, func(t *testing.T, round int, rec *lin.Recorder) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := in.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := in.Start(ctx); err != nil {
			t.Fatal(err)
		}
	})
	return judge(t, r, violations, lost)
}

// connectionCut puts a TCP proxy between both replicas and PostgreSQL and,
// in each round, resets every connection as soon as it next sends
// anything (a batch's statements, its COMMIT), for a moment.
func connectionCut(t *testing.T) row {
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var proxy *toxiproxy.Proxy
	x := framework.Start(t, framework.Postgres, framework.Options{Process: true, Replicas: 2, Endpoint: func(dsn string) string {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		proxy = toxiproxy.NewProxy(api, "postgres", "127.0.0.1:0", u.Host)
		if err := proxy.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proxy.Stop)
		u.Host = proxy.Listen
		return u.String()
	}})
	resets := 0
	r, violations, lost := scenario(t, x, 6, func(t *testing.T, round int, rec *lin.Recorder) {
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"cut","type":"reset_peer","stream":"upstream","toxicity":1,"attributes":{"timeout":0}}`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := proxy.Toxics.RemoveToxic(context.Background(), "cut"); err != nil {
			t.Fatal(err)
		}
		resets++
	})
	r.note += fmt.Sprintf("; %d resets", resets)
	return judge(t, r, violations, lost)
}

// diskFull runs QuantyKube on SQLite on a small tmpfs and, in each round,
// fills it: writes must then fail with a clear error while reads go on;
// once the ballast is removed writing resumes (scenario waits for it).
// At the end the database passes PRAGMA integrity_check.
func diskFull(t *testing.T) row {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		framework.Unavailable(t, "tmpfs", fmt.Errorf("mount: %w", err))
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs: %v", err)
		}
	})
	x := framework.Start(t, framework.SQLite, framework.Options{Process: true, Endpoint: func(string) string {
		return "sqlite://" + filepath.Join(dir, "state.db")
	}})
	cli := x.Client(t)
	var extra []string
	var errText string
	r, violations, lost := scenario(t, x, 3, func(t *testing.T, round int, rec *lin.Recorder) {
		ballast := filepath.Join(dir, "ballast")
		full := rec.Now()
		fill(t, ballast)
		// Full: the workload's writes fail, with the database's own words
		// for it; reads go on.
		deadline := time.Now().Add(30 * time.Second)
		for errText = ""; errText == ""; {
			if time.Now().After(deadline) {
				extra = append(extra, fmt.Sprintf("round %d: writes still succeed 30 s after the disk filled", round))
				break
			}
			time.Sleep(50 * time.Millisecond)
			errText = lastWriteFailure(rec, full)
		}
		if errText != "" && !strings.Contains(errText, "full") {
			extra = append(extra, fmt.Sprintf("round %d: a write on a full disk failed with %q, which does not say the disk is full", round, errText))
		}
		for range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := cli.Get(ctx, lin.Prefix, clientv3.WithPrefix())
			cancel()
			if err != nil {
				extra = append(extra, fmt.Sprintf("round %d: a read on a full disk failed: %v", round, err))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
	})
	x.Stop(t)
	if msg := integrity(t, dir); msg != "ok" {
		extra = append(extra, "PRAGMA integrity_check: "+msg)
	}
	x.Start(t)
	r.violations += len(extra)
	r.note += fmt.Sprintf("; the write error: %s", errText)
	return judge(t, r, append(violations, extra...), lost)
}

// lastWriteFailure is the server's error for the workload's last write
// that failed after since ("" if none did); the workload's own short
// deadlines do not count.
func lastWriteFailure(rec *lin.Recorder, since int64) string {
	fs := rec.Failures()
	for i := len(fs) - 1; i >= 0 && fs[i].Time >= since; i-- {
		if fs[i].Op.Kind != lin.Get && fs[i].Op.Kind != lin.Range && !strings.Contains(fs[i].Err, context.DeadlineExceeded.Error()) {
			return fs[i].Err
		}
	}
	return ""
}

// fill writes ballast until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// report prints the table and appends it to $QUANTY_CHAOS_REPORT.
func report(t *testing.T, rows []row) {
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | rounds | operations checked | acknowledged writes lost | violations | took | notes |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %v | %s |\n", r.scenario, r.rounds, r.ops, r.lost, r.violations, r.took.Round(time.Second), r.note)
	}
	t.Logf("chaos:\n%s", b.String())
	appendReport(t, b.String())
}

// appendReport appends a table to $QUANTY_CHAOS_REPORT, when it is set
// (make chaos prints the file at the end).
func appendReport(t *testing.T, table string) {
	p := os.Getenv("QUANTY_CHAOS_REPORT")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = f.WriteString(table + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Errorf("writing the report: %v", err)
	}
}
