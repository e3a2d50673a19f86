package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/test/framework"
)

// The loads and thresholds are etcdctl v3.6.16's (ctlv3/command/check.go).
func TestPerfLoadsAreEtcdctls(t *testing.T) {
	want := map[string][3]int{"s": {150, 50, 60}, "m": {1000, 200, 60}, "l": {8000, 500, 60}, "xl": {15000, 1000, 60}}
	long := map[string]string{"small": "s", "medium": "m", "large": "l", "xLarge": "xl"}
	for name, w := range want {
		l, err := findPerfLoad(name)
		if err != nil || [3]int{l.limit, l.clients, int(l.duration / time.Second)} != w {
			t.Errorf("load %s: %+v, %v; want limit, clients, seconds %v", name, l, err, w)
		}
	}
	for name, short := range long {
		if l, err := findPerfLoad(name); err != nil || l.name != short {
			t.Errorf("load %s: %+v, %v; want %s", name, l, err, short)
		}
	}
	if _, err := findPerfLoad("xs"); err == nil || !strings.Contains(err.Error(), `--load "xs": want s (small), m (medium), l (large), xl (xLarge)`) {
		t.Errorf("load xs: %v", err)
	}
	if perfKeyBytes != 256 || perfValueBytes != 1024 || perfMinThroughputRatio != 0.9 || perfMaxSlowest != 0.5 || perfMaxStddev != 0.1 {
		t.Errorf("key %d, value %d bytes, thresholds %v %v %v: not etcdctl's", perfKeyBytes, perfValueBytes, perfMinThroughputRatio, perfMaxSlowest, perfMaxStddev)
	}
}

// Each threshold is judged as etcdctl judges it, on either side of it: a
// throughput of exactly 90% of the limit fails (etcd fails at <= 0.9), a
// slowest request or a standard deviation exactly at the bound passes.
func TestJudgePerfThresholds(t *testing.T) {
	good := perfStats{Requests: 9000, Errors: map[string]int{}, Throughput: 150, Slowest: 0.01, Stddev: 0.001}
	for _, c := range []struct {
		name  string
		edit  func(*perfStats)
		load  string
		fails string // the check that fails; "" none
		line  string // the line etcd prints for it
	}{
		{"all good", func(*perfStats) {}, "s", "", "PASS: Throughput is 151 writes/s"},
		{"throughput just above 90%", func(s *perfStats) { s.Throughput = 135.01 }, "s", "", "PASS: Throughput is 136 writes/s"},
		{"throughput at 90%", func(s *perfStats) { s.Throughput = 135 }, "s", "throughput", "FAIL: Throughput too low: 136 writes/s"},
		{"throughput below 90%, m", func(s *perfStats) { s.Throughput = 899.9 }, "m", "throughput", "FAIL: Throughput too low: 900 writes/s"},
		{"throughput above 90%, xl", func(s *perfStats) { s.Throughput = 13501 }, "xl", "", "PASS: Throughput is 13502 writes/s"},
		{"slowest at 0.5s", func(s *perfStats) { s.Slowest = 0.5 }, "s", "", "PASS: Slowest request took 0.500000s"},
		{"slowest over 0.5s", func(s *perfStats) { s.Slowest = 0.500001 }, "s", "slowest", "FAIL: Slowest request took too long: 0.500001s"},
		{"stddev at 0.1s", func(s *perfStats) { s.Stddev = 0.1 }, "s", "", "PASS: Stddev is 0.100000s"},
		{"stddev over 0.1s", func(s *perfStats) { s.Stddev = 0.100001 }, "s", "stddev", "FAIL: Stddev too high: 0.100001s"},
		{"one error", func(s *perfStats) { s.Errors = map[string]int{"etcdserver: too many requests": 1} }, "s", "errors", "FAIL: ERROR(etcdserver: too many requests) -> 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := good
			c.edit(&s)
			l, err := findPerfLoad(c.load)
			if err != nil {
				t.Fatal(err)
			}
			checks := judgePerf(l, s)
			if names := checkNames(checks); !slices.Equal(names, []string{"errors", "throughput", "slowest", "stddev"}) {
				t.Fatalf("checks %v", names)
			}
			var lines []string
			for _, ch := range checks {
				if ch.pass == (ch.name == c.fails) {
					t.Errorf("%s: pass %v (measured %s, passes when %s)", ch.name, ch.pass, ch.measured, ch.want)
				}
				lines = append(lines, ch.lines...)
			}
			if !slices.Contains(lines, c.line) {
				t.Errorf("lines %q lack %q", lines, c.line)
			}
			res := perfResult{checks: checks}
			if res.pass() != (c.fails == "") {
				t.Errorf("pass %v, want %v", res.pass(), c.fails == "")
			}
		})
	}
}

func checkNames(cs []perfCheck) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.name)
	}
	return out
}

// The figures are etcd's report's: the successful puts' latencies, the
// population's standard deviation, the puts that succeeded over the run.
func TestPerfStats(t *testing.T) {
	s := newPerfStats([][]float64{{0.4, 0.1}, {0.3}, {0.2}}, []map[string]int{{"boom": 2}, {"boom": 1, "bang": 1}, {}}, 2*time.Second)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if s.Requests != 4 || s.failed() != 4 || s.Errors["boom"] != 3 || s.Errors["bang"] != 1 || !near(s.Throughput, 2) || !near(s.Seconds, 2) {
		t.Errorf("counts: %+v", s)
	}
	if !near(s.Average, 0.25) || !near(s.Stddev, math.Sqrt(0.0125)) || s.Fastest != 0.1 || s.Slowest != 0.4 || s.P50 != 0.2 || s.P90 != 0.4 || s.P99 != 0.4 {
		t.Errorf("latencies: %+v", s)
	}
	// No put succeeded: no NaN, which -o json could not print.
	z := newPerfStats([][]float64{nil}, []map[string]int{{"boom": 5}}, time.Second)
	if z.Requests != 0 || z.Average != 0 || z.Stddev != 0 || z.Throughput != 0 {
		t.Errorf("no successful put: %+v", z)
	}
	if _, err := json.Marshal(z); err != nil {
		t.Error(err)
	}
}

// shortPerf shortens check perf's runs for the test: the loads, rates and
// thresholds stay etcd's.
func shortPerf(t *testing.T, d time.Duration) {
	checkPerfDuration = d
	t.Cleanup(func() { checkPerfDuration = 0 })
}

// perfTable matches the figures' lines of check perf's table.
var (
	perfPuts    = regexp.MustCompile(`^(\d+) puts in [0-9.]+s, (\d+) failed; latency average [0-9.]+s, fastest [0-9.]+s, p50 [0-9.]+s, p90 [0-9.]+s, p99 [0-9.]+s$`)
	perfDeleted = regexp.MustCompile(`^(\d+) keys deleted$`)
	perfRow     = regexp.MustCompile(`^(errors|throughput|slowest|stddev) +(.+?) {3,}(.+?) {3,}(PASS|FAIL)$`)
)

// check perf, run as etcdctl's against QuantyKube on SQLite (over TLS
// with client certificates), against two replicas on PostgreSQL (the
// clients spread over both endpoints), and against etcd v3.6:
// its table, a verdict consistent with its rows, every put a revision
// and no failed put, the rate never above the load's, its keys deleted
// and the store compacted at the deletion.
func TestCheckPerf(t *testing.T) {
	shortPerf(t, 2*time.Second)
	framework.Run(t, []framework.Backend{framework.SQLite, framework.Postgres, framework.Etcd}, func(t *testing.T, b framework.Backend) {
		ctx := t.Context()
		var o framework.Options
		var tlsArgs []string
		if b == framework.SQLite {
			ca := framework.NewCA(t, "perf-ca")
			cert, key := ca.Issue(t, framework.CertSpec{CommonName: "quantykube", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
			ccert, ckey := ca.Issue(t, framework.CertSpec{CommonName: "perf", Client: true})
			o.TLS = &framework.TLSFiles{CAFile: ca.CertFile, CertFile: cert, KeyFile: key, ClientCert: ccert, ClientKey: ckey}
			tlsArgs = []string{"--trusted-ca-file", ca.CertFile, "--cert-file", ccert, "--key-file", ckey}
		}
		if b == framework.Postgres {
			o.Process, o.Replicas = true, 2
		}
		x := framework.Start(t, b, o)
		cli := x.Client(t)
		if _, err := cli.Put(ctx, "/perf-test", "outside the prefix"); err != nil {
			t.Fatal(err)
		}
		before, err := cli.Get(ctx, "/perf-test")
		if err != nil {
			t.Fatal(err)
		}
		rev := before.Header.Revision

		var out, errs bytes.Buffer
		args := append([]string{"perf", "--endpoints", strings.Join(x.Endpoints(), ","), "--prefix", "/perf-test/", "--auto-compact", "--auto-defrag"}, tlsArgs...)
		runErr := CheckCommand{}.Run(ctx, args, &out, &errs)
		if runErr != nil && !errors.Is(runErr, errPerfFail) {
			t.Fatalf("check perf: %v\n%s", runErr, errs.String())
		}
		t.Logf("check perf on %s:\n%s", b, out.String())
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) < 15 {
			t.Fatalf("check perf printed %d lines:\n%s", len(lines), out.String())
		}
		if want := `load s (small): 50 clients, at most 150 writes/s, keys of "/perf-test/" and 256 bytes, values of 1024 bytes, for 2s`; lines[0] != want {
			t.Errorf("line 1: %q, want %q", lines[0], want)
		}
		m := perfPuts.FindStringSubmatch(lines[1])
		if m == nil {
			t.Fatalf("line 2: %q", lines[1])
		}
		puts, _ := strconv.ParseInt(m[1], 10, 64)
		// The limiter lets at most one put through per 1/150 s, and one at
		// once: a rate check, not a timing assumption.
		if puts == 0 || puts > 150*2+1 || m[2] != "0" {
			t.Errorf("%d puts and %s failed in 2s at load s (at most 301, none failed)", puts, m[2])
		}
		if d := perfDeleted.FindStringSubmatch(lines[2]); d == nil || d[1] != m[1] {
			t.Errorf("line 3: %q, want %d keys deleted", lines[2], puts)
		}
		// Every put made a revision, the deletion one more, and the store
		// was compacted there.
		deletedAt := rev + puts + 1
		if want := fmt.Sprintf("Compacted with revision %d", deletedAt); lines[3] != want {
			t.Errorf("line 4: %q, want %q", lines[3], want)
		}
		eps := x.Endpoints()
		for i, ep := range eps {
			if want := fmt.Sprintf("Defragmented %q", ep); lines[4+i] != want {
				t.Errorf("line %d: %q, want %q", 5+i, lines[4+i], want)
			}
		}
		// The rest as after one endpoint's line.
		lines = slices.Delete(lines, 5, 4+len(eps))
		if lines[5] != "" || strings.Join(strings.Fields(lines[6]), " ") != "CHECK MEASURED PASSES WHEN RESULT" {
			t.Errorf("no table header: %q %q", lines[5], lines[6])
		}
		results := map[string]string{}
		for i, name := range []string{"errors", "throughput", "slowest", "stddev"} {
			r := perfRow.FindStringSubmatch(lines[7+i])
			if r == nil || r[1] != name {
				t.Fatalf("row %d: %q, want %s's", i+1, lines[7+i], name)
			}
			results[name] = r[4]
		}
		if results["errors"] != "PASS" {
			t.Errorf("errors: %s", results["errors"])
		}
		verdicts := lines[12:]
		wantLines := []string{"Throughput", "Slowest request", "Stddev"}
		for i, name := range []string{"throughput", "slowest", "stddev"} {
			if !strings.HasPrefix(verdicts[i], results[name]+": "+wantLines[i]) {
				t.Errorf("etcd's line for %s: %q, its row says %s", name, verdicts[i], results[name])
			}
		}
		pass := !slices.Contains(slices.Collect(maps.Values(results)), "FAIL")
		if last := lines[len(lines)-1]; last != verdict(pass) || (runErr == nil) != pass {
			t.Errorf("last line %q, error %v; the rows say pass=%v", last, runErr, pass)
		}

		after, err := cli.Get(ctx, "/perf-test", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Kvs) != 1 || string(after.Kvs[0].Key) != "/perf-test" || after.Header.Revision != deletedAt {
			t.Errorf("after check perf: %d keys under /perf-test at revision %d, want the one outside the prefix at %d", len(after.Kvs), after.Header.Revision, deletedAt)
		}
		if _, err := cli.Get(ctx, "/perf-test", clientv3.WithRev(rev)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("a read at revision %d after --auto-compact: %v, want %v", rev, err, rpctypes.ErrCompacted)
		}
	})
}

// -o json prints the figures, the checks judgePerf makes of them and the
// verdict; the keys deleted are the puts made.
func TestCheckPerfJSON(t *testing.T) {
	shortPerf(t, time.Second)
	x := framework.Start(t, framework.SQLite, framework.Options{})
	var out, errs bytes.Buffer
	runErr := CheckCommand{}.Run(t.Context(), []string{"perf", "--endpoints", x.Endpoint(), "-o", "json"}, &out, &errs)
	if runErr != nil && !errors.Is(runErr, errPerfFail) {
		t.Fatalf("check perf: %v\n%s", runErr, errs.String())
	}
	var rep perfReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("check perf -o json printed %q: %v", out.String(), err)
	}
	if rep.Load != "s" || rep.Clients != 50 || rep.Limit != 150 || rep.Duration != "1s" || rep.Prefix != "/etcdctl-check-perf/" || rep.KeyBytes != 256 || rep.ValueBytes != 1024 {
		t.Errorf("the load: %+v", rep)
	}
	if rep.Stats.Requests == 0 || rep.Stats.Requests > 151 || len(rep.Stats.Errors) != 0 || rep.Deleted != int64(rep.Stats.Requests) || rep.Compacted != 0 || rep.Defragmented != nil {
		t.Errorf("%d puts, errors %v, %d deleted, compacted %d, defragmented %v", rep.Stats.Requests, rep.Stats.Errors, rep.Deleted, rep.Compacted, rep.Defragmented)
	}
	res := perfResult{checks: judgePerf(perfLoads[0], rep.Stats)}
	var want []checkEntry
	for _, c := range res.checks {
		want = append(want, checkEntry{c.name, c.measured, c.want, c.pass})
	}
	if !slices.Equal(rep.Checks, want) || rep.Pass != res.pass() || (runErr == nil) != rep.Pass {
		t.Errorf("checks %+v, pass %v, error %v; judgePerf of the figures: %+v, pass %v", rep.Checks, rep.Pass, runErr, want, res.pass())
	}
}

// A run whose puts fail prints etcd's lines for it, ends with FAIL and
// exits 1: here a server that takes no request as large as the check's.
func TestCheckPerfFailExits1(t *testing.T) {
	shortPerf(t, time.Second)
	x := framework.Start(t, framework.SQLite, framework.Options{Config: func(c *endpoint.Config) { c.MaxRequestBytes = 1024 }})
	var out, errs bytes.Buffer
	if code := run(t.Context(), []string{"check", "perf", "--endpoints", x.Endpoint()}, &out, &errs); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s%s", code, out.String(), errs.String())
	}
	text := out.String()
	for _, want := range []string{"\nFAIL: too many errors\nFAIL: ERROR(", "\nFAIL: Throughput too low: 1 writes/s\n", "\nPASS: Slowest request took 0.000000s\n", "\nFAIL\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if !strings.HasSuffix(text, "\nFAIL\n") || !strings.Contains(errs.String(), "quantykube: check perf: FAIL at load s") {
		t.Errorf("stdout ends %q; stderr %q", text[max(0, len(text)-20):], errs.String())
	}
	resp, err := x.Client(t).Get(t.Context(), "/etcdctl-check-perf/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 || resp.Header.Revision != 1 {
		t.Errorf("after the failed check: %v, %v; want no key at revision 1", resp, err)
	}
}

// check perf refuses a prefix that holds keys, leaving them and the store
// as they were, and bad flags, each with a clear error.
func TestCheckPerfRefusals(t *testing.T) {
	x := framework.Start(t, framework.SQLite, framework.Options{})
	cli := x.Client(t)
	ctx := t.Context()
	if _, err := cli.Put(ctx, "/etcdctl-check-perf/mine", "keep"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoints", x.Endpoint()}, `prefix "/etcdctl-check-perf/" holds keys ("/etcdctl-check-perf/mine"): delete them first`},
		{[]string{"--endpoints", x.Endpoint(), "--prefix", ""}, "--prefix must not be empty"},
		{[]string{"--endpoints", x.Endpoint(), "--load", "huge"}, `--load "huge": want s (small)`},
		{[]string{"--endpoints", x.Endpoint(), "now"}, `check perf takes no arguments, got ["now"]`},
		{[]string{"--endpoints", x.Endpoint(), "--cert-file", "c.pem"}, "--cert-file and --key-file go together"},
		{[]string{"--endpoints", "ftp://127.0.0.1:1"}, `unknown scheme "ftp"`},
		{[]string{"--endpoints", framework.FreeAddr(t), "--dial-timeout", "300ms"}, "no connection within --dial-timeout 300ms"},
		{[]string{"--endpoints", x.Endpoint(), "-o", "yaml"}, `--output "yaml": want one of table, json`},
	} {
		var out bytes.Buffer
		err := CheckPerfCommand{}.Run(ctx, c.args, &out, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check perf %q: %v, want %q", c.args, err, c.want)
		}
	}
	resp, err := cli.Get(ctx, "/etcdctl-check-perf/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "keep" || resp.Header.Revision != 2 {
		t.Errorf("after the refusals: %v, %v; want the one key at revision 2", resp, err)
	}
}

// An interrupted check (SIGINT ends the command's context) stops writing,
// deletes the keys it wrote and says so, without a verdict.
func TestCheckPerfInterrupted(t *testing.T) {
	shortPerf(t, time.Minute)
	x := framework.Start(t, framework.SQLite, framework.Options{})
	cli := x.Client(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Interrupted once its first put is seen.
	wch := cli.Watch(ctx, "/etcdctl-check-perf/", clientv3.WithPrefix())
	go func() {
		for resp := range wch {
			if len(resp.Events) > 0 {
				cancel()
				return
			}
		}
	}()
	var out, errs bytes.Buffer
	err := CheckPerfCommand{}.Run(ctx, []string{"--endpoints", x.Endpoint()}, &out, &errs)
	if err == nil || !regexp.MustCompile(`^check perf: interrupted; the [1-9]\d* keys written under "/etcdctl-check-perf/" are deleted: context canceled$`).MatchString(err.Error()) {
		t.Fatalf("interrupted check perf: %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("an interrupted check printed a report:\n%s", out.String())
	}
	resp, err := cli.Get(t.Context(), "/etcdctl-check-perf/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("after the interrupted check: %v, %v; want no key", resp, err)
	}
}
