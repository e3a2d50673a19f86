//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore/objstoretest"
	"github.com/quantyroot/quantykube/test/framework"
	lin "github.com/quantyroot/quantykube/test/linearizability"
)

// TestObjectStoreFaults runs `quantykube serve --replicate s3://...` on
// SQLite under the recorder's write load, with a real S3 server
// (SeaweedFS) behind a TCP proxy (toxiproxy), and takes the object store
// away three ways in turn: the server stopped for 60 s and started again
// on its data (QuantyKube itself restarted halfway: it must start without
// it), every connection reset for 8 s then every byte swallowed for 8 s,
// and every answer 2 s late on a thin link for 20 s. Through each, writes go on at the latency
// they had (printed), /readyz?verbose stays 200 and, when the replica
// falls behind, warns; the lag metric rises. After each, the backlog
// drains (lag under 2 s), the bucket's chain (`replica ls`) is one base
// and contiguous segments, and `restore --from` of the latest equals the
// live store at that revision (`check hash`, history included). At the
// end the whole history is checked as every chaos scenario's is.
func TestObjectStoreFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	// The bandwidth toxic traces every interrupted write to zerolog's
	// global logger.
	level := zerolog.GlobalLevel()
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	t.Cleanup(func() { zerolog.SetGlobalLevel(level) })
	weed := objstoretest.Start(t)
	objstoretest.SetCredentials(t)
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(api, "s3", "127.0.0.1:0", strings.TrimPrefix(weed.Endpoint(), "http://"))
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	through := fmt.Sprintf("s3://%s/faults?endpoint=http://%s&region=us-east-1&force-path-style=true", objstoretest.Bucket, proxy.Listen)
	direct := weed.URL("faults")
	metricsAddr := framework.FreeAddr(t)
	x := framework.Start(t, framework.SQLite, framework.Options{Process: true, Args: []string{
		"--replicate", through, "--replicate-interval", "1s", "--metrics-listen-address", metricsAddr}})
	m := &monitor{t: t, base: "http://" + metricsAddr}

	seed := uint64(time.Now().UnixNano())
	rec, err := lin.Start(ctx, lin.Config{Endpoints: x.Endpoints(), TLS: x.ClientTLS(), Clients: objstoreClients, OpsPerClient: 1 << 30, Seed: seed, ShortTimeouts: -1})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			rec.Stop(context.WithoutCancel(ctx))
		}
	}()
	waitAcked(t, rec, "before the faults")
	m.waitCaughtUp(ctx, "at the start")

	var phases []phase
	for _, f := range []struct {
		name   string
		length time.Duration
		warn   bool // the replica falls more than 5 intervals behind: readyz must warn
		start  func()
		end    func()
		mid    func() // halfway through, when set
		midIs  string // what mid does
	}{
		// Halfway, QuantyKube is restarted (SIGTERM): it must start and
		// serve without its object store, and resume the chain after.
		{"object store stopped", 60 * time.Second, true, weed.Stop, weed.Restart, func() { x.Restart(t) }, "QuantyKube restarted"},
		// Refused, then silent: halfway, the proxy stops resetting and
		// swallows every byte instead (a PUT then waits on an answer that
		// never comes, until the toxic goes and the proxy closes it).
		{"connections reset, then black-holed", 16 * time.Second, true, func() {
			addToxic(t, proxy, `{"name":"reset","type":"reset_peer","stream":"upstream","toxicity":1,"attributes":{"timeout":0}}`)
		}, func() { removeToxics(t, proxy, "hole") }, func() {
			removeToxics(t, proxy, "reset")
			addToxic(t, proxy, `{"name":"hole","type":"timeout","stream":"upstream","toxicity":1,"attributes":{"timeout":0}}`)
		}, "resets replaced by a black hole"},
		{"2 s answers, 16 KiB/s", 20 * time.Second, false, func() {
			addToxic(t, proxy, `{"name":"late","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":2000,"jitter":0}}`)
			addToxic(t, proxy, `{"name":"thin","type":"bandwidth","stream":"upstream","toxicity":1,"attributes":{"rate":16}}`)
		}, func() { removeToxics(t, proxy, "late", "thin") }, nil, ""},
	} {
		p := phase{name: f.name, mustWarn: f.warn}
		time.Sleep(3 * time.Second) // a stretch of normal writes before
		now := rec.Now()
		p.before = [2]int64{now - int64(3*time.Second), now}
		ackedAt := rec.Acked()
		f.start()
		p.during[0] = rec.Now()
		if f.mid == nil {
			p.maxLag, p.warned = m.watch(ctx, f.length)
		} else {
			lag1, warned1 := m.watch(ctx, f.length/2)
			f.mid()
			lag2, warned2 := m.watch(ctx, f.length/2)
			p.maxLag, p.warned = max(lag1, lag2), warned1 && warned2
			p.mid = f.midIs
		}
		p.during[1] = rec.Now()
		p.acked = rec.Acked() - ackedAt
		began := time.Now()
		f.end()
		p.back = time.Since(began)
		drained := time.Now()
		m.waitCaughtUp(ctx, "after "+f.name)
		p.drain = time.Since(drained)
		p.rev, p.segments = checkReplica(ctx, t, x, direct, f.name)
		phases = append(phases, p)
		t.Logf("%s for %s (halfway: %q): %d writes acknowledged meanwhile, lag up to %.1f s, readyz warned: %v; store back in %s, backlog drained in %s; restored revision %d equals the live store's (%d segments)",
			f.name, f.length, p.mid, p.acked, p.maxLag, p.warned, p.back.Round(time.Millisecond), p.drain.Round(time.Millisecond), p.rev, p.segments)
	}

	waitAcked(t, rec, "after the last fault")
	h, err := rec.Stop(ctx)
	stopped = true
	if err != nil {
		t.Fatal(err)
	}
	for i := range phases {
		p := &phases[i]
		p.p99Before, p.nBefore = writeP99(h, p.before)
		p.p99During, p.nDuring = writeP99(h, p.during)
		t.Logf("%s: write p99 %s before (%d writes), %s during (%d writes)", p.name, p.p99Before, p.nBefore, p.p99During, p.nDuring)
		judgePhase(t, p)
	}
	checking := time.Now()
	rep := lin.Check(h)
	cli, err := framework.NewTLSClient(x.ClientTLS(), x.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	nLost, lost, err := lin.Lost(ctx, cli, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d: %d operations checked (%d acknowledged writes, %d unknown outcomes), %d watch events to revision %d; porcupine %v, checks %v",
		seed, rep.Ops, rep.Acked, rep.Unknown, rep.Events, h.Final, rep.CheckTime.Round(time.Millisecond), time.Since(checking).Round(time.Millisecond))
	judge(t, row{}, rep.Violations, lost)
	objstoreReport(t, phases, nLost, len(rep.Violations))
}

// objstoreClients is the recorder's clients here: one, where the other
// scenarios have six, and none of its writes sent with a deadline of a
// few milliseconds (ShortTimeouts): this run lasts minutes, not seconds,
// and porcupine's check grows far faster than the history with
// concurrent and unknown outcomes (two clients with short deadlines:
// 2.5 minutes for 90,000 operations on this loaded machine; one without:
// 22 s for 130,000). One client writes 300 to 600 times a second here.
// The fault is the object store's, never the store's: every write's
// outcome is known.
const objstoreClients = 1

// phase is one fault's figures; before and during are recorder times.
type phase struct {
	name                 string
	before, during       [2]int64
	acked                int64
	maxLag               float64
	warned, mustWarn     bool
	mid                  string // what happened halfway through the fault
	back, drain          time.Duration
	rev                  int64
	segments             int
	p99Before, p99During time.Duration
	nBefore, nDuring     int
}

// judgePhase fails t when writes stopped or slowed down with the object
// store: the fault's own delays (60 s, 2 s an answer) dwarf the
// allowance, which leaves room for this machine's noise.
func judgePhase(t *testing.T, p *phase) {
	t.Helper()
	if p.acked < minAcked || p.nDuring == 0 {
		t.Errorf("%s: %d writes acknowledged during the fault: writes waited on the object store", p.name, p.acked)
	}
	if limit := 3*p.p99Before + 500*time.Millisecond; p.p99During > limit {
		t.Errorf("%s: write p99 %s during the fault, %s before (over %s): writes waited on the object store", p.name, p.p99During, p.p99Before, limit)
	}
	if p.mustWarn && !p.warned {
		t.Errorf("%s: /readyz?verbose never warned while the replica fell %.1f s behind", p.name, p.maxLag)
	}
	if p.maxLag < 2 {
		t.Errorf("%s: the lag metric rose to %.1f s only: the fault did not hold the replicator back", p.name, p.maxLag)
	}
}

// writeP99 is the 99th percentile latency of the acknowledged writes
// sent within w, and how many there were.
func writeP99(h *lin.History, w [2]int64) (time.Duration, int) {
	var ds []time.Duration
	for _, op := range h.Ops {
		if op.Req.Kind == lin.Get || op.Req.Kind == lin.Range || op.Resp.Unknown || op.Call < w[0] || op.Call >= w[1] {
			continue
		}
		ds = append(ds, time.Duration(op.Return-op.Call))
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[(len(ds)*99)/100].Round(100 * time.Microsecond), len(ds)
}

func addToxic(t *testing.T, p *toxiproxy.Proxy, js string) {
	t.Helper()
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("toxic %s: %v", js, err)
	}
}

func removeToxics(t *testing.T, p *toxiproxy.Proxy, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := p.Toxics.RemoveToxic(context.Background(), n); err != nil {
			t.Fatalf("removing toxic %s: %v", n, err)
		}
	}
}

// monitor reads the server's /metrics and /readyz?verbose.
type monitor struct {
	t    *testing.T
	base string
}

// metrics are the quantykube_replicate_ gauges and counters.
func (m *monitor) metrics(ctx context.Context) map[string]float64 {
	m.t.Helper()
	body, code := m.get(ctx, "/metrics")
	if code != http.StatusOK {
		m.t.Fatalf("/metrics: %d", code)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "quantykube_replicate_") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// readyz is /readyz?verbose's body; it fails t unless it answers 200.
func (m *monitor) readyz(ctx context.Context) string {
	m.t.Helper()
	body, code := m.get(ctx, "/readyz?verbose")
	if code != http.StatusOK {
		m.t.Errorf("/readyz?verbose answered %d while the object store is away (it must stay ready):\n%s", code, body)
	}
	return body
}

func (m *monitor) get(ctx context.Context, path string) (string, int) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+path, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		m.t.Fatalf("%s: %v", path, err)
	}
	return string(b), resp.StatusCode
}

// watch samples the lag metric and /readyz?verbose every half second for
// d: the highest lag in seconds, and whether readyz warned (always 200).
func (m *monitor) watch(ctx context.Context, d time.Duration) (float64, bool) {
	m.t.Helper()
	maxLag, warned := 0.0, false
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		maxLag = max(maxLag, m.metrics(ctx)["quantykube_replicate_lag_seconds"])
		if strings.Contains(m.readyz(ctx), "[!]replicate warning") {
			warned = true
		}
	}
	return maxLag, warned
}

// waitCaughtUp waits (at most 90 s) until the replicator ships again with
// under 2 s of lag, no failure, and readyz no longer warns.
func (m *monitor) waitCaughtUp(ctx context.Context, when string) {
	m.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		mt := m.metrics(ctx)
		body := m.readyz(ctx)
		if mt["quantykube_replicate_lag_seconds"] < 2 && mt["quantykube_replicate_failing"] == 0 && mt["quantykube_replicate_shipped_revision"] > 0 &&
			!strings.Contains(body, "replicate warning") {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: the replicator did not catch up in 90 s: %v\n%s", when, mt, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkReplica restores the bucket's latest with `quantykube restore
// --from` into a new store, lists the bucket with `quantykube replica ls`
// (segments from its oldest base on, without a gap or an overlap, the restored
// revision the end of one), and compares `check hash` of the restored
// store, its history included, with the live store's at the restored
// revision. It returns that revision and the number of segments.
func checkReplica(ctx context.Context, t *testing.T, x *framework.Target, url, when string) (int64, int) {
	t.Helper()
	bin := framework.Binary(t)
	dir := t.TempDir()
	restored := "sqlite://" + filepath.Join(dir, "restored.db")
	// --keep-revision: check hash compares the revisions themselves, which
	// the default's bump marks compacted.
	out := run(ctx, t, bin, "restore", "--from", url, "--keep-revision", "--endpoint", restored)
	var rev int64
	if i := strings.Index(out, " at revision "); i < 0 {
		t.Fatalf("%s: restore --from says no revision:\n%s", when, out)
	} else if _, err := fmt.Sscanf(out[i:], " at revision %d ", &rev); err != nil {
		t.Fatalf("%s: restore --from: %v:\n%s", when, err, out)
	}

	ls := run(ctx, t, bin, "replica", "ls", url)
	var bases []int64
	var segs [][2]int64
	for _, line := range strings.Split(ls, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "base":
			r, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatalf("replica ls: %q: %v", line, err)
			}
			bases = append(bases, r)
		case len(f) >= 3 && f[0] == "segment":
			first, err1 := strconv.ParseInt(f[1], 10, 64)
			last, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil || first > last {
				t.Fatalf("replica ls: %q", line)
			}
			segs = append(segs, [2]int64{first, last})
		}
	}
	// A scheduled base does not restart the chain: the segments after the
	// oldest base run on without a gap, the first may straddle it. A
	// fresh base forced by a gap would leave one between segments.
	if len(bases) == 0 || len(segs) == 0 || segs[0][0] > bases[0]+1 {
		t.Fatalf("%s: replica ls shows no chain from its oldest base (%d bases, %d segments):\n%s", when, len(bases), len(segs), ls)
	}
	next, ends := segs[0][0], false
	for _, s := range segs {
		if s[0] != next {
			t.Fatalf("%s: replica ls: segment %d-%d follows revision %d: the chain has a gap or an overlap:\n%s", when, s[0], s[1], next-1, ls)
		}
		next, ends = s[1]+1, ends || s[1] == rev
	}
	if !ends {
		t.Fatalf("%s: restore --from restored revision %d, which ends no segment:\n%s", when, rev, ls)
	}
	if len(bases) != 1 {
		t.Logf("%s: %d bases: %v", when, len(bases), bases)
	}

	r := strconv.FormatInt(rev, 10)
	want := hashAt(ctx, t, bin, x.DSN(), r)
	got := hashAt(ctx, t, bin, restored, r)
	if got != want {
		t.Fatalf("%s: the store restored from the bucket differs from the live store at revision %d:\nrestored %s\nlive     %s", when, rev, got, want)
	}
	return rev, len(segs)
}

// hashAt is `check hash -o json` of the store at rev, history from the
// first revision included, without the floor (a restored store's is its
// base's).
func hashAt(ctx context.Context, t *testing.T, bin, dsn, rev string) string {
	t.Helper()
	var h struct {
		Hash     string `json:"hash"`
		Revision int64  `json:"revision"`
		Keys     int64  `json:"keys"`
		Changes  int64  `json:"historyChanges"`
	}
	out := run(ctx, t, bin, "check", "hash", "--endpoint", dsn, "--revision", rev, "--history-from", "1", "-o", "json")
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("check hash -o json: %v:\n%s", err, out)
	}
	return fmt.Sprintf("hash %s, revision %d, %d keys, %d changes", h.Hash, h.Revision, h.Keys, h.Changes)
}

// run runs the quantykube binary (at most a minute) and returns its
// standard output; any failure fails t.
func run(ctx context.Context, t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("quantykube %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// objstoreReport prints the faults' table and appends it to
// $QUANTY_CHAOS_REPORT.
func objstoreReport(t *testing.T, phases []phase, lost, violations int) {
	var b strings.Builder
	fmt.Fprintf(&b, "| object store fault | writes acked during | write p99 before / during | max lag | readyz warned | store back in | backlog drained in | restored = live at | acknowledged writes lost | violations |\n")
	fmt.Fprintf(&b, "|---|---:|---|---:|---|---:|---:|---:|---:|---:|\n")
	for _, p := range phases {
		fmt.Fprintf(&b, "| %s | %d | %s / %s | %.1f s | %v | %s | %s | r%d | %d | %d |\n", p.name, p.acked, p.p99Before, p.p99During, p.maxLag, p.warned,
			p.back.Round(100*time.Millisecond), p.drain.Round(10*time.Millisecond), p.rev, lost, violations)
	}
	t.Logf("object store faults:\n%s", b.String())
	appendReport(t, b.String())
}
