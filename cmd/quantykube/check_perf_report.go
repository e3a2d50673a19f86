package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// What check perf measured, how it judges it, and how it prints it.

// perfStats are a run's figures, as etcd's report computes them: the
// latencies are the successful puts' in seconds, the throughput is those
// puts over the whole run (from the first put sent to the last answered),
// the standard deviation is the population's.
type perfStats struct {
	Requests   int            `json:"requests"`
	Errors     map[string]int `json:"errors"`
	Seconds    float64        `json:"seconds"`
	Throughput float64        `json:"throughput"`
	Average    float64        `json:"average"`
	Fastest    float64        `json:"fastest"`
	Slowest    float64        `json:"slowest"`
	Stddev     float64        `json:"stddev"`
	P50        float64        `json:"p50"`
	P90        float64        `json:"p90"`
	P99        float64        `json:"p99"`
}

// newPerfStats are the figures of the clients' latencies and errors over
// elapsed. With no successful put the latency figures are 0 (etcd's are
// NaN, which no JSON can hold).
func newPerfStats(lats [][]float64, errs []map[string]int, elapsed time.Duration) perfStats {
	all := slices.Concat(lats...)
	slices.Sort(all)
	s := perfStats{Requests: len(all), Errors: map[string]int{}, Seconds: elapsed.Seconds()}
	for _, m := range errs {
		for e, n := range m {
			s.Errors[e] += n
		}
	}
	if s.Seconds > 0 {
		s.Throughput = float64(len(all)) / s.Seconds
	}
	if len(all) == 0 {
		return s
	}
	var sum float64
	for _, l := range all {
		sum += l
	}
	s.Average = sum / float64(len(all))
	var sq float64
	for _, l := range all {
		sq += (l - s.Average) * (l - s.Average)
	}
	s.Stddev = math.Sqrt(sq / float64(len(all)))
	s.Fastest, s.Slowest = all[0], all[len(all)-1]
	s.P50, s.P90, s.P99 = quantile(all, 0.5), quantile(all, 0.9), quantile(all, 0.99)
	return s
}

// quantile is the smallest of sorted that q of them do not exceed.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// failed is how many puts failed.
func (s perfStats) failed() int {
	n := 0
	for _, c := range s.Errors {
		n += c
	}
	return n
}

// perfCheck is one of check perf's checks: what it measured, when it
// passes, and the lines etcdctl prints for it.
type perfCheck struct {
	name, measured, want string
	pass                 bool
	lines                []string
}

// judgePerf applies etcdctl v3.6's thresholds to a run at load l. The
// lines are etcdctl's, word for word, but that its two lines for a slow
// run start with "FAIL: " as every other failure's does.
func judgePerf(l perfLoad, s perfStats) []perfCheck {
	failed := s.failed()
	errs := perfCheck{name: "errors", measured: fmt.Sprintf("%d of %d", failed, failed+s.Requests), want: "none", pass: failed == 0}
	if !errs.pass {
		errs.lines = append(errs.lines, "FAIL: too many errors")
		for _, e := range slices.Sorted(maps.Keys(s.Errors)) {
			errs.lines = append(errs.lines, fmt.Sprintf("FAIL: ERROR(%s) -> %d", e, s.Errors[e]))
		}
	}
	// etcd rounds the throughput it prints up, and compares the ratio.
	shown := int(s.Throughput) + 1
	tput := perfCheck{name: "throughput", measured: fmt.Sprintf("%.1f writes/s", s.Throughput),
		want: fmt.Sprintf("> %.0f writes/s", perfMinThroughputRatio*float64(l.limit)),
		pass: s.Throughput/float64(l.limit) > perfMinThroughputRatio}
	if tput.pass {
		tput.lines = []string{fmt.Sprintf("PASS: Throughput is %d writes/s", shown)}
	} else {
		tput.lines = []string{fmt.Sprintf("FAIL: Throughput too low: %d writes/s", shown)}
	}
	slow := perfCheck{name: "slowest", measured: fmt.Sprintf("%fs", s.Slowest), want: fmt.Sprintf("<= %gs", float64(perfMaxSlowest)), pass: s.Slowest <= perfMaxSlowest}
	if slow.pass {
		slow.lines = []string{fmt.Sprintf("PASS: Slowest request took %fs", s.Slowest)}
	} else {
		slow.lines = []string{fmt.Sprintf("FAIL: Slowest request took too long: %fs", s.Slowest)}
	}
	dev := perfCheck{name: "stddev", measured: fmt.Sprintf("%fs", s.Stddev), want: fmt.Sprintf("<= %gs", float64(perfMaxStddev)), pass: s.Stddev <= perfMaxStddev}
	if dev.pass {
		dev.lines = []string{fmt.Sprintf("PASS: Stddev is %fs", s.Stddev)}
	} else {
		dev.lines = []string{fmt.Sprintf("FAIL: Stddev too high: %fs", s.Stddev)}
	}
	return []perfCheck{errs, tput, slow, dev}
}

// perfReport is check perf's -o json.
type perfReport struct {
	Load         string       `json:"load"`
	Clients      int          `json:"clients"`
	Limit        int          `json:"limit"`
	Duration     string       `json:"duration"`
	Prefix       string       `json:"prefix"`
	KeyBytes     int          `json:"keyBytes"`
	ValueBytes   int          `json:"valueBytes"`
	Stats        perfStats    `json:"stats"`
	Checks       []checkEntry `json:"checks"`
	Pass         bool         `json:"pass"`
	Deleted      int64        `json:"deleted"`
	Compacted    int64        `json:"compactedRevision,omitempty"`
	Defragmented []string     `json:"defragmented,omitempty"`
}

type checkEntry struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Want     string `json:"passesWhen"`
	Pass     bool   `json:"pass"`
}

// writePerf prints the report: -o json one object; the table the load,
// the figures, one row per check, then etcdctl's lines, the last PASS or
// FAIL.
func writePerf(w io.Writer, output string, r *perfRun, res *perfResult) error {
	if output == "json" {
		rep := perfReport{Load: r.load.name, Clients: r.load.clients, Limit: r.load.limit, Duration: r.load.duration.String(),
			Prefix: r.prefix, KeyBytes: perfKeyBytes, ValueBytes: perfValueBytes, Stats: res.stats, Pass: res.pass(),
			Deleted: res.deleted, Compacted: res.compacted, Defragmented: res.defragmented}
		for _, c := range res.checks {
			rep.Checks = append(rep.Checks, checkEntry{c.name, c.measured, c.want, c.pass})
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	s := res.stats
	fmt.Fprintf(w, "%s, for %v\n", r.describe(), r.load.duration)
	fmt.Fprintf(w, "%d puts in %.2fs, %d failed; latency average %fs, fastest %fs, p50 %fs, p90 %fs, p99 %fs\n",
		s.Requests, s.Seconds, s.failed(), s.Average, s.Fastest, s.P50, s.P90, s.P99)
	fmt.Fprintf(w, "%d keys deleted\n", res.deleted)
	if res.compacted != 0 {
		fmt.Fprintf(w, "Compacted with revision %d\n", res.compacted)
	}
	for _, ep := range res.defragmented {
		fmt.Fprintf(w, "Defragmented %q\n", ep)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tMEASURED\tPASSES WHEN\tRESULT")
	for _, c := range res.checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.name, c.measured, c.want, verdict(c.pass))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, c := range res.checks {
		for _, l := range c.lines {
			fmt.Fprintln(w, l)
		}
	}
	_, err := fmt.Fprintln(w, verdict(res.pass()))
	return err
}

func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}
