package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
	"github.com/quantyroot/quantykube/test/framework"
)

// migrateClock is the stores' clock: it moves only when told, so that
// retention prunes what the test wants pruned.
type migrateClock struct{ ms atomic.Int64 }

func (c *migrateClock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// migrateConfig is every store's configuration in the migrate tests: the
// test's clock, and a rule that prunes /hb/ after two minutes.
func migrateConfig(clk *migrateClock) framework.Options {
	return framework.Options{Config: func(cfg *endpoint.Config) {
		cfg.Now = clk.Now
		cfg.RetainPrefixes = []mvcc.RetentionRule{{Prefix: []byte("/hb/"), Retain: 2 * time.Minute}}
		cfg.PruneInterval = time.Hour
	}}
}

// migrateSource is a SQLite store with history: puts, deletes, keys on
// leases, a compaction and heartbeats retention pruned. It returns the
// stopped store, every key it ever held, and its compaction revision.
func migrateSource(t *testing.T, clk *migrateClock) (*framework.Target, []string, int64) {
	ctx := t.Context()
	x := framework.Start(t, framework.SQLite, migrateConfig(clk))
	cli := x.Client(t)
	keys := map[string]bool{}
	put := func(k, v string, opts ...clientv3.OpOption) int64 {
		t.Helper()
		resp, err := cli.Put(ctx, k, v, opts...)
		if err != nil {
			t.Fatal(err)
		}
		keys[k] = true
		return resp.Header.Revision
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	var compactAt int64
	for i := range 30 {
		put(fmt.Sprintf("/obj/%02d", i%7), fmt.Sprint("v", i))
		put(fmt.Sprintf("/hb/%d", i%2), fmt.Sprint("beat", i))
		if i%5 == 4 {
			if _, err := cli.Delete(ctx, fmt.Sprintf("/obj/%02d", i%7)); err != nil {
				t.Fatal(err)
			}
		}
		if i == 10 {
			compactAt = put("/leased/a", "x", clientv3.WithLease(lease.ID))
		}
		clk.ms.Add((20 * time.Second).Milliseconds())
	}
	put("/leased/b", "", clientv3.WithLease(lease.ID)) // an empty value stays empty
	if _, err := cli.Compact(ctx, compactAt); err != nil {
		t.Fatal(err)
	}
	n, err := x.Server().Store().Prune(ctx)
	if err != nil || n == 0 {
		t.Fatalf("prune: %d rows, %v: want some /hb/ rows pruned", n, err)
	}
	x.Stop(t)
	var all []string
	for k := range keys {
		all = append(all, k)
	}
	return x, all, compactAt
}

// historyLogs is History's Log of each key, as text.
func historyLogs(t *testing.T, x *framework.Target, keys []string) map[string]string {
	t.Helper()
	u, err := url.Parse(x.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h := historypb.NewHistoryClient(conn)
	logs := map[string]string{}
	for _, k := range keys {
		var b strings.Builder
		req := &historypb.Request{Key: []byte(k)}
		for {
			resp, err := h.Log(t.Context(), req)
			if err != nil {
				t.Fatalf("Log(%s): %v", k, err)
			}
			for _, e := range resp.Entries {
				b.WriteString(prototext.Format(e))
				b.WriteString("\n")
			}
			if resp.Continue == "" {
				break
			}
			req.Continue = resp.Continue
		}
		logs[k] = b.String()
	}
	return logs
}

// storeHashes are check hash's answers at the revisions.
func storeHashes(t *testing.T, dsn string, revs []int64, from int64) []string {
	t.Helper()
	var out []string
	for _, r := range revs {
		rep, err := checkHash(t, "--endpoint", dsn, "--revision", fmt.Sprint(r))
		if err != nil {
			t.Fatalf("check hash %s at %d: %v", dsn, r, err)
		}
		out = append(out, fmt.Sprintf("%d:%s:%d", r, rep.Hash, rep.Keys))
	}
	rep, err := checkHash(t, "--endpoint", dsn, "--history-from", fmt.Sprint(from))
	if err != nil {
		t.Fatalf("check hash %s from %d: %v", dsn, from, err)
	}
	return append(out, fmt.Sprintf("history from %d: %s at %d", from, rep.Hash, rep.Revision))
}

func runMigrate(t *testing.T, from, to string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	err := MigrateCommand{}.Run(ctx, []string{"--from", from, "--to", to, "--batch-rows", "16"}, &out, &errb)
	t.Logf("quantykube migrate --from %s --to %s:\n%s%s", from, to, out.String(), errb.String())
	return out.String(), err
}

// A store with history goes SQLite -> PostgreSQL -> MySQL -> SQLite: after
// each hop check hash agrees at several revisions and over the history
// retained, History's Log of every key is the same, the leases and the
// compaction floor came along, and the next write takes the next
// revision.
func TestMigrateRoundTrip(t *testing.T) {
	framework.Require(t, framework.Postgres)
	framework.Require(t, framework.MySQL)
	clk := &migrateClock{}
	clk.ms.Store(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC).UnixMilli())
	src, keys, compactAt := migrateSource(t, clk)
	top, err := checkHash(t, "--endpoint", src.DSN())
	if err != nil {
		t.Fatal(err)
	}
	floor := top.Floor // retention's, above the compaction
	if floor < compactAt {
		t.Fatalf("the source's floor %d is below its compaction %d", floor, compactAt)
	}
	revs := []int64{floor, (floor + top.Revision) / 2, top.Revision}
	wantHashes := storeHashes(t, src.DSN(), revs, floor)
	src.Start(t)
	wantLogs := historyLogs(t, src, keys)
	// A NOSPACE alarm is the source's database past its quota: the
	// copies do not carry it (ADR-050).
	mc := pb.NewMaintenanceClient(src.Client(t).ActiveConnection())
	if _, err := mc.Alarm(t.Context(), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: 1, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	src.Stop(t)
	if !strings.Contains(wantLogs["/hb/0"], "beat") || strings.Count(wantLogs["/hb/0"], "beat") >= 15 {
		t.Fatalf("the source's /hb/0 log should be pruned, not empty: %s", wantLogs["/hb/0"])
	}

	prev := src
	for _, b := range []framework.Backend{framework.Postgres, framework.MySQL, framework.SQLite} {
		target := framework.Start(t, b, migrateConfig(clk))
		target.Stop(t)
		if _, err := runMigrate(t, prev.DSN(), target.DSN()); err != nil {
			t.Fatalf("migrate to %s: %v", b, err)
		}
		if got := storeHashes(t, target.DSN(), revs, floor); strings.Join(got, "\n") != strings.Join(wantHashes, "\n") {
			t.Fatalf("%s: hashes\n%s\nwant\n%s", b, strings.Join(got, "\n"), strings.Join(wantHashes, "\n"))
		}
		target.Start(t)
		got := historyLogs(t, target, keys)
		for _, k := range keys {
			if got[k] != wantLogs[k] {
				t.Errorf("%s: Log(%s):\n%s\nwant\n%s", b, k, got[k], wantLogs[k])
			}
		}
		cli := target.Client(t)
		if _, err := cli.Get(t.Context(), "/obj/00", clientv3.WithRev(compactAt-1)); err == nil || !strings.Contains(err.Error(), "compacted") {
			t.Errorf("%s: Get below the compaction: %v, want compacted", b, err)
		}
		lk, err := cli.Leases(t.Context())
		if err != nil || len(lk.Leases) != 1 {
			t.Errorf("%s: leases %v, %v: want the source's one", b, lk, err)
		}
		if al, err := cli.AlarmList(t.Context()); err != nil || len(al.Alarms) != 0 {
			t.Errorf("%s: alarms %v, %v: want none of the source's", b, al, err)
		}
		target.Stop(t)
		prev = target
	}
	// Retention goes on where the source's left off: two minutes later
	// both prune the same rows (a cursor carried too far would leave
	// some behind on the target).
	clk.ms.Add((2 * time.Minute).Milliseconds())
	logs := map[string]map[string]string{}
	for _, x := range []*framework.Target{src, prev} {
		x.Start(t)
		if _, err := x.Server().Store().Prune(t.Context()); err != nil {
			t.Fatal(err)
		}
		logs[x.DSN()] = historyLogs(t, x, keys)
		x.Stop(t)
	}
	for _, k := range keys {
		if a, b := logs[src.DSN()][k], logs[prev.DSN()][k]; a != b {
			t.Errorf("after pruning again, Log(%s) on the last copy:\n%s\nwant the source's\n%s", k, b, a)
		}
	}
	if logs[src.DSN()]["/hb/0"] == wantLogs["/hb/0"] {
		t.Errorf("the second prune removed nothing of /hb/0")
	}
	// The last store takes writes on from the source's revision.
	prev.Start(t)
	resp, err := prev.Client(t).Put(t.Context(), "/after", "x")
	if err != nil || resp.Header.Revision != top.Revision+1 {
		t.Fatalf("the first write after the moves: %v, %v; want revision %d", resp, err, top.Revision+1)
	}
}

// migrate refuses what it cannot copy, before writing anything: missing
// flags, a source that is no store, a target that is not empty (the
// source given as the target among them) or holds other tables.
func TestMigrateRefusals(t *testing.T) {
	dir := t.TempDir()
	src := framework.Start(t, framework.SQLite, framework.Options{})
	if _, err := src.Client(t).Put(t.Context(), "/a", "1"); err != nil {
		t.Fatal(err)
	}
	src.Stop(t)
	before, err := checkHash(t, "--endpoint", src.DSN(), "--history-from", "0")
	if err != nil {
		t.Fatal(err)
	}
	empty := func() string {
		x := framework.Start(t, framework.SQLite, framework.Options{})
		x.Stop(t)
		return x.DSN()
	}
	foreign := filepath.Join(dir, "foreign.db")
	if err := os.WriteFile(foreign, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE kine (id INTEGER)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", empty()}, "--from is required"},
		{[]string{"--from", src.DSN()}, "--to is required"},
		{[]string{"--from", src.DSN(), "--to", empty(), "--batch-rows", "0"}, "--batch-rows 0"},
		{[]string{"--from", src.DSN(), "--to", empty(), "extra"}, "takes no arguments"},
		{[]string{"--from", "sqlite://" + filepath.Join(dir, "none.db"), "--to", empty()}, "the source"},
		{[]string{"--from", src.DSN(), "--to", src.DSN()}, "not empty"},
		{[]string{"--from", src.DSN(), "--to", "sqlite://" + foreign}, "not QuantyKube's (kine)"},
		{[]string{"--from", "http://127.0.0.1:2379", "--to", empty()}, "etcd server, not a database"},
	} {
		var out, errb bytes.Buffer
		err := MigrateCommand{}.Run(t.Context(), c.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("migrate %v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	after, err := checkHash(t, "--endpoint", src.DSN(), "--history-from", "0")
	if err != nil || after.Hash != before.Hash {
		t.Fatalf("the source changed: %v, %v", after, err)
	}
}
