//go:build chaos

package robustness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"go.etcd.io/etcd/tests/v3/robustness/client"
	"go.etcd.io/etcd/tests/v3/robustness/identity"
	"go.etcd.io/etcd/tests/v3/robustness/model"
	"go.etcd.io/etcd/tests/v3/robustness/report"
	"go.etcd.io/etcd/tests/v3/robustness/traffic"
	"go.etcd.io/etcd/tests/v3/robustness/validate"
)

// The run's settings, from test/chaos (robustness_test.go), which starts
// the servers, injects the faults and reads Result.
const (
	envEndpoints = "QUANTY_ROBUSTNESS_ENDPOINTS" // client URLs, comma-separated: one member each
	envTraffic   = "QUANTY_ROBUSTNESS_TRAFFIC"   // EtcdPut, EtcdPutDeleteLease or Kubernetes
	envDuration  = "QUANTY_ROBUSTNESS_DURATION"  // of the traffic, e.g. 10s
	envFault     = "QUANTY_ROBUSTNESS_FAULT"     // its name; "none": none asked for
	envHistory   = "QUANTY_ROBUSTNESS_HISTORY"   // a quantykube binary: read History's Log; "watch": record a watch
	envWAL       = "QUANTY_ROBUSTNESS_WAL"       // etcd's data directory: compare with its WAL
	envOut       = "QUANTY_ROBUSTNESS_OUT"       // a directory for result.json and a failed run's report
)

// The fault is asked for on file descriptor 3 (a line, the fault's name)
// and acknowledged on 4 (a line, once it is over): the parent holds the
// servers.
const (
	faultAsk = 3
	faultAck = 4
)

// Profile is twice etcd's high traffic profile: twice its rate and its
// clients. The rate below which etcd calls a run unreliable stays etcd's
// (100 requests/s before the fault, in both of its profiles).
func Profile() traffic.Profile {
	p := traffic.HighTrafficProfile
	p.MaximalQPS, p.BurstableQPS, p.ClientCount = 2*p.MaximalQPS, 2*p.BurstableQPS, 2*p.ClientCount
	return p
}

var traffics = map[string]traffic.Traffic{
	"EtcdPut":            traffic.EtcdPut,
	"EtcdPutDeleteLease": traffic.EtcdPutDeleteLease,
	"Kubernetes":         traffic.Kubernetes,
}

// Result is what a run reports to its parent (result.json).
type Result struct {
	Pass bool
	// etcd's own figures ("Reporting complete traffic").
	Successes, Failures int64
	QPS                 float64
	// Revisions is how many revisions the history held and were matched
	// to requests; Unacknowledged of them by requests whose client saw
	// an error.
	Revisions, Unacknowledged, Ambiguous int
	Operations, WatchEvents              int
	// WAL is, against etcd, the comparison of the rebuilt requests with
	// its WAL's.
	WAL string
	// Messages are the validators' complaints and the harness's own.
	Messages        []string
	ValidateSeconds float64
}

func getenv(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: this test is run by test/chaos (make chaos), which starts the servers", name)
	}
	return v
}

// TestDrive is one run of etcd's robustness traffic against the servers of
// QUANTY_ROBUSTNESS_ENDPOINTS, with a fault in the middle, then the
// validation of its history by etcd's validators.
func TestDrive(t *testing.T) {
	endpoints := strings.Split(getenv(t, envEndpoints), ",")
	tr, ok := traffics[getenv(t, envTraffic)]
	if !ok {
		t.Fatalf("%s: unknown traffic %q", envTraffic, os.Getenv(envTraffic))
	}
	duration, err := time.ParseDuration(getenv(t, envDuration))
	if err != nil {
		t.Fatal(err)
	}
	fault, source, out := getenv(t, envFault), getenv(t, envHistory), getenv(t, envOut)
	res := &Result{}
	defer func() {
		res.Pass = !t.Failed()
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(filepath.Join(out, "result.json"), b, 0o644); err != nil {
			t.Error(err)
		}
	}()

	logs, lg := logger()
	ctx, cancel := context.WithTimeout(context.Background(), duration+validateTimeout(duration)+5*time.Minute)
	defer cancel()
	var rec *Recorder
	if source == "watch" {
		if rec, err = Record(endpoints); err != nil {
			t.Fatal(err)
		}
	}
	if err := warm(ctx, endpoints, Profile().ClientCount, source != "watch"); err != nil {
		t.Fatal(err)
	}
	clus := Cluster(endpoints)
	baseTime := time.Now()
	ids := identity.NewIDProvider()
	injected := make(chan report.FailpointInjection, 1)
	go inject(t, fault, duration, baseTime, injected)
	maxRev := make(chan int64, 1)
	watched := make(chan []report.ClientReport, 1)
	go func() {
		watched <- client.CollectClusterWatchEvents(ctx, t, clus, maxRev, client.WatchConfig{RequestProgress: true}, baseTime, ids)
	}()
	reports := traffic.SimulateTraffic(ctx, t, lg, clus, Profile(), tr, injected, baseTime, ids)
	var last int64
	for _, r := range reports {
		for _, op := range r.KeyValue {
			last = max(last, op.Output.(model.MaybeEtcdResponse).Revision)
		}
	}
	maxRev <- last
	close(maxRev)
	reports = append(reports, <-watched...)
	figures(logs, res)
	for _, r := range reports {
		res.Operations += len(r.KeyValue)
		res.WatchEvents += r.WatchEventCount()
	}

	var revs []Revision
	if rec != nil {
		revs, err = rec.Stop(ctx, last)
	} else {
		revs, err = HistoryChanges(ctx, source, endpoints[0])
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg := validate.Config{ExpectRevisionUnique: tr.ExpectUniqueRevision()}
	rebuilt, err := Rebuild(reports, revs)
	if err != nil {
		res.Messages = append(res.Messages, err.Error())
		if err := Save(out, reports, nil, cfg); err != nil {
			t.Error(err)
		}
		t.Fatalf("the history does not match the requests: %v", err)
	}
	res.Revisions, res.Unacknowledged, res.Ambiguous = rebuilt.Revisions, rebuilt.Unacknowledged, rebuilt.Ambiguous
	if dir := os.Getenv(envWAL); dir != "" {
		wal, err := report.PersistedRequestsDirs(lg, []string{dir})
		if err != nil {
			t.Fatal(err)
		}
		n, err := CompareWithWAL(rebuilt.Requests, wal)
		if err != nil {
			res.WAL = err.Error()
			res.Messages = append(res.Messages, "the rebuilt requests are not etcd's WAL: "+err.Error())
			t.Errorf("the requests rebuilt from the history are not those of etcd's WAL: %v", err)
		} else {
			res.WAL = fmt.Sprintf("equal: the same %d requests made the %d revisions (the WAL holds %d requests)", n, rebuilt.Revisions, len(wal))
			t.Logf("rebuilt from the history = etcd's WAL: %s", res.WAL)
		}
	}

	began := time.Now()
	failed := t.Failed()
	visualize := validate.ValidateAndReturnVisualize(t, lg, cfg, reports, rebuilt.Requests, validateTimeout(duration))
	res.ValidateSeconds = time.Since(began).Seconds()
	for _, e := range logs.FilterLevelExact(zapcore.ErrorLevel).All() {
		res.Messages = append(res.Messages, entryText(e))
	}
	if err := Save(out, reports, rebuilt.Requests, cfg); err != nil {
		t.Error(err)
	}
	if !failed && t.Failed() {
		res.Messages = append(res.Messages, Regressions(reports, 5)...)
		for _, m := range res.Messages {
			t.Log(m)
		}
		if err := visualize(filepath.Join(out, "history.html")); err != nil {
			t.Error(err)
		}
		t.Logf("the run's history and porcupine's view of it are in %s", out)
	}
}

// validateTimeout bounds porcupine's search: etcd's 5 minutes, or 30 s
// per second of traffic for longer runs. A linearizable history of 10 s
// at 2,000 requests/s (20,000 operations) took it 3 minutes here, and a
// timeout fails the run as a violation would.
func validateTimeout(traffic time.Duration) time.Duration {
	return max(5*time.Minute, 30*traffic)
}

// inject asks the parent for the fault in the middle of the traffic, as
// etcd's runner injects its failpoints, and reports it to the traffic,
// which ends a while after it.
func inject(t *testing.T, fault string, duration time.Duration, baseTime time.Time, injected chan<- report.FailpointInjection) {
	defer close(injected)
	before := duration/2 + time.Duration(rand.Int64N(int64(duration/5))) - duration/10
	time.Sleep(before)
	start := time.Since(baseTime)
	if fault != "none" {
		if err := askFault(fault); err != nil {
			t.Errorf("fault %s: %v", fault, err)
		}
	}
	end := time.Since(baseTime)
	time.Sleep(max(duration-before-(end-start), time.Second))
	injected <- report.FailpointInjection{Start: start, End: end, Name: fault}
}

func askFault(name string) error {
	ask, ack := os.NewFile(faultAsk, "fault-ask"), os.NewFile(faultAck, "fault-ack")
	if ask == nil || ack == nil {
		return errors.New("no fault pipes (descriptors 3 and 4)")
	}
	if _, err := fmt.Fprintln(ask, name); err != nil {
		return err
	}
	line, err := bufio.NewReader(ack).ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for the fault: %w", err)
	}
	if line = strings.TrimSpace(line); line != "done" {
		return errors.New(line)
	}
	return nil
}

// logger is etcd's zap logger for the suite, to stderr, keeping its
// entries for figures.
func logger() (*observer.ObservedLogs, *zap.Logger) {
	core, logs := observer.New(zapcore.InfoLevel)
	console := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.InfoLevel)
	return logs, zap.New(zapcore.NewTee(core, console))
}

// figures takes etcd's own figures of the traffic from its log.
func figures(logs *observer.ObservedLogs, res *Result) {
	for _, e := range logs.FilterMessage("Reporting complete traffic").All() {
		m := e.ContextMap()
		res.Successes, _ = m["successes"].(int64)
		res.Failures, _ = m["failures"].(int64)
		res.QPS, _ = m["qps"].(float64)
	}
}

func entryText(e observer.LoggedEntry) string {
	var b strings.Builder
	b.WriteString(e.Message)
	for k, v := range e.ContextMap() {
		fmt.Fprintf(&b, " %s=%v", k, v)
	}
	return b.String()
}
