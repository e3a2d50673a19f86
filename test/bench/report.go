package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

type targetResult struct {
	t      target
	rounds []*roundResult
}

// best is one client level, the better figure of the rounds for speed and
// the worse for correctness.
type best struct {
	ok                                      bool
	create, createP99, update, updateP99    float64 // ops/s, seconds
	get, getP99, list, listP99, big, bigP99 float64
	watchP50, watchP99                      float64
	// server CPU seconds per operation (the lowest of the rounds), and the
	// harness's beside it
	createCPU, updateCPU, getCPU, listCPU, bigCPU float64
	createH, updateH, getH, listH, bigH           float64
	watchN                                        int
	lost, missed, conflicts, bad                  int
	errs                                          int
	notes                                         []string
}

func better(cur, v float64, higher bool) float64 {
	switch {
	case v == 0:
		return cur
	case cur == 0:
		return v
	case higher:
		return max(cur, v)
	default:
		return min(cur, v)
	}
}

func (tr *targetResult) level(c int) best {
	var b best
	for _, rr := range tr.rounds {
		for _, l := range rr.levels {
			if l.clients != c {
				continue
			}
			b.ok = true
			b.create = better(b.create, l.create.rate(), true)
			b.createP99 = better(b.createP99, l.create.p99().Seconds(), false)
			b.update = better(b.update, l.update.rate(), true)
			b.updateP99 = better(b.updateP99, l.update.p99().Seconds(), false)
			b.get = better(b.get, l.get.rate(), true)
			b.getP99 = better(b.getP99, l.get.p99().Seconds(), false)
			b.list = better(b.list, l.list.rate(), true)
			b.listP99 = better(b.listP99, l.list.p99().Seconds(), false)
			b.big = better(b.big, l.big.rate(), true)
			b.bigP99 = better(b.bigP99, l.big.p99().Seconds(), false)
			b.createCPU = better(b.createCPU, l.create.perOp(l.create.serverCPU), false)
			b.updateCPU = better(b.updateCPU, l.update.perOp(l.update.serverCPU), false)
			b.getCPU = better(b.getCPU, l.get.perOp(l.get.serverCPU), false)
			b.listCPU = better(b.listCPU, l.list.perOp(l.list.serverCPU), false)
			b.bigCPU = better(b.bigCPU, l.big.perOp(l.big.serverCPU), false)
			b.createH = better(b.createH, l.create.perOp(l.create.harnessCPU), false)
			b.updateH = better(b.updateH, l.update.perOp(l.update.harnessCPU), false)
			b.getH = better(b.getH, l.get.perOp(l.get.harnessCPU), false)
			b.listH = better(b.listH, l.list.perOp(l.list.harnessCPU), false)
			b.bigH = better(b.bigH, l.big.perOp(l.big.harnessCPU), false)
			b.watchP50 = better(b.watchP50, pct(l.watch, 0.5).Seconds(), false)
			b.watchP99 = better(b.watchP99, pct(l.watch, 0.99).Seconds(), false)
			b.watchN = max(b.watchN, len(l.watch))
			b.lost = max(b.lost, l.lost)
			b.missed = max(b.missed, l.missed)
			b.conflicts = max(b.conflicts, l.conflicts)
			b.bad = max(b.bad, l.badRes)
			b.errs = max(b.errs, l.create.errs+l.update.errs+l.get.errs+l.list.errs+l.big.errs)
			b.notes = append(b.notes, l.notes...)
		}
	}
	return b
}

func (tr *targetResult) memory() (hwm, rss int64) {
	for _, rr := range tr.rounds {
		if rr.err != nil || rr.mem.hwm == 0 {
			continue
		}
		if hwm == 0 || rr.mem.hwm < hwm {
			hwm = rr.mem.hwm
		}
		if rss == 0 || rr.mem.rss < rss {
			rss = rr.mem.rss
		}
	}
	return
}

func (tr *targetResult) size() (bytes, rev int64) {
	for _, rr := range tr.rounds {
		if rr.err == nil && rr.dbBytes > 0 {
			bytes, rev = rr.dbBytes, rr.rev
		}
	}
	return
}

func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtSec(s float64) string {
	switch {
	case s == 0:
		return "–"
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 0.01:
		return fmt.Sprintf("%.0f ms", s*1000)
	case s >= 0.001:
		return fmt.Sprintf("%.1f ms", s*1000)
	}
	return fmt.Sprintf("%.2f ms", s*1000)
}

func fmtMB(b int64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f MB", float64(b)/(1<<20))
}

// fmtMB1 is fmtMB with a decimal, for sizes of a few megabytes.
func fmtMB1(b int64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
}

// ratio is how many times better a is than b: a/b for rates, b/a for
// latencies and sizes.
func ratio(a, b float64, higherBetter bool) string {
	if a == 0 || b == 0 {
		return "–"
	}
	r := a / b
	if !higherBetter {
		r = b / a
	}
	if r >= 10 {
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.2fx", r)
}

func printReport(w io.Writer, results []*targetResult, cfg config, took time.Duration) {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "\n### Run %s on %s (%d CPUs, GOMAXPROCS %d)", time.Now().UTC().Format("2006-01-02 15:04 UTC"), host, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if took > 0 {
		fmt.Fprintf(w, ", %v", took.Round(time.Second))
	}
	fmt.Fprintf(w, "\n\n%d keys per write phase, %d-byte values, phases bounded at %v; best of %d round(s) per figure (lost/missed: worst round)",
		cfg.keys, cfg.valueSize, cfg.phaseTime, maxRounds(results))
	if cfg.list100k {
		fmt.Fprint(w, "; list 10k/100k from the rounds that filled 100,000 keys (-list100k-rounds)")
	}
	fmt.Fprint(w, ".\n\n")

	hdr := "| target | clients | create/s | create p99 | update/s | update p99 | get/s | get p99 | list 500/500 /s | list p99 |"
	sep := "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	if cfg.list100k {
		hdr += " list 10k/100k /s | list10k p99 |"
		sep += "---:|---:|"
	}
	hdr += " watch p50 | watch p99 | lost writes | missed events | other anomalies |"
	sep += "---:|---:|---:|---:|---:|"
	fmt.Fprintln(w, hdr)
	fmt.Fprintln(w, sep)
	var notes []string
	for _, tr := range results {
		for _, c := range cfg.clients {
			b := tr.level(c)
			if !b.ok {
				fmt.Fprintf(w, "| %s | %d | failed: %s |\n", tr.t.name, c, firstErr(tr))
				continue
			}
			row := fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |", tr.t.name, c,
				fmtRate(b.create), fmtSec(b.createP99), fmtRate(b.update), fmtSec(b.updateP99),
				fmtRate(b.get), fmtSec(b.getP99), fmtRate(b.list), fmtSec(b.listP99))
			if cfg.list100k {
				row += fmt.Sprintf(" %s | %s |", fmtRate(b.big), fmtSec(b.bigP99))
			}
			row += fmt.Sprintf(" %s | %s | %d | %d | %d |", fmtSec(b.watchP50), fmtSec(b.watchP99), b.lost, b.missed, b.conflicts+b.bad)
			fmt.Fprintln(w, row)
			for _, n := range dedupe(b.notes) {
				notes = append(notes, fmt.Sprintf("%s, %d clients: %s", tr.t.name, c, n))
			}
			if b.conflicts > 0 {
				notes = append(notes, fmt.Sprintf("%s, %d clients: %d create/update compares failed on keys nobody else wrote", tr.t.name, c, b.conflicts))
			}
			if b.errs > 0 {
				notes = append(notes, fmt.Sprintf("%s, %d clients: %d request errors (timeouts count here, not in the rates)", tr.t.name, c, b.errs))
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | peak RSS (VmHWM) | RSS at end (VmRSS) | database size | revisions | bytes per revision |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, tr := range results {
		hwm, rss := tr.memory()
		size, rev := tr.size()
		per := "–"
		if rev > 1 && size > 0 {
			per = fmt.Sprintf("%.0f", float64(size)/float64(rev-1))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s |\n", tr.t.name, fmtMB(hwm), fmtMB(rss), fmtMB(size), rev, per)
	}
	printCPU(w, results, cfg)
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, "- "+n)
		}
	}

	// Ratios: every QuantyKube target against every peer in this run; an
	// older build (quantykube@base) is one more peer.
	var qks, peers []*targetResult
	for _, tr := range results {
		if isQuantyKube(tr.t) {
			qks = append(qks, tr)
		} else {
			peers = append(peers, tr)
		}
	}
	if len(qks) == 0 || len(peers) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios from this run: how many times better QuantyKube is (rates: QuantyKube ÷ peer; latencies and RSS: peer ÷ QuantyKube). Above 1x QuantyKube is ahead.")
	fmt.Fprintln(w)
	hdr = "| QuantyKube vs peer | clients | create/s | create p99 | update/s | update p99 | get/s | get p99 | list 500 /s |"
	sep = "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	if cfg.list100k {
		hdr += " list 10k /s |"
		sep += "---:|"
	}
	hdr += " watch p99 | peak RSS |"
	sep += "---:|---:|"
	fmt.Fprintln(w, hdr)
	fmt.Fprintln(w, sep)
	comparePairs(qks, peers, cfg, func(q, p *targetResult, c int, a, b best) {
		row := fmt.Sprintf("| %s vs %s | %d | %s | %s | %s | %s | %s | %s | %s |", q.t.name, p.t.name, c,
			ratio(a.create, b.create, true), ratio(a.createP99, b.createP99, false),
			ratio(a.update, b.update, true), ratio(a.updateP99, b.updateP99, false),
			ratio(a.get, b.get, true), ratio(a.getP99, b.getP99, false), ratio(a.list, b.list, true))
		if cfg.list100k {
			row += " " + ratio(a.big, b.big, true) + " |"
		}
		rss := "–"
		if c == cfg.clients[len(cfg.clients)-1] {
			qh, _ := q.memory()
			ph, _ := p.memory()
			rss = ratio(float64(qh), float64(ph), false)
		}
		row += fmt.Sprintf(" %s | %s |", ratio(a.watchP99, b.watchP99, false), rss)
		fmt.Fprintln(w, row)
	})
	printCPURatios(w, qks, peers, cfg)
	if max(maxRounds(qks), maxRounds(peers)) > 1 {
		printPairedRatios(w, qks, peers, cfg)
	}
}

// comparePairs calls f for every QuantyKube target and peer the ratios
// compare (the same engine, and etcd for everyone) at each client count
// both measured.
func comparePairs(qks, peers []*targetResult, cfg config, f func(q, p *targetResult, clients int, a, b best)) {
	for _, q := range qks {
		for _, p := range peers {
			if p.t.engine != q.t.engine && p.t.name != "etcd" {
				continue
			}
			for _, c := range cfg.clients {
				if a, b := q.level(c), p.level(c); a.ok && b.ok {
					f(q, p, c, a, b)
				}
			}
		}
	}
}

// fmtCPU gives a server's and the harness's CPU per operation as
// "server / harness".
func fmtCPU(server, harness float64) string {
	if server == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f / %.0f µs", server*1e6, harness*1e6)
}

// cpuTable prints a CPU table's title and header; its first column is
// named first.
func cpuTable(w io.Writer, title, first string, cfg config) {
	hdr := "| " + first + " | clients | create | update | get | list 500 |"
	sep := "|---|---:|---:|---:|---:|---:|"
	if cfg.list100k {
		hdr += " list 10k |"
		sep += "---:|"
	}
	fmt.Fprintf(w, "\n%s\n\n%s\n%s\n", title, hdr, sep)
}

// printCPU prints each target's CPU per operation, its own (with its
// PostgreSQL cluster's) and the harness's. The harness shares the
// machine's cores with the server, so no rate can exceed cores ÷ (server +
// harness CPU per operation): the rates of two servers differ less than
// their CPU does once both are CPU-bound.
func printCPU(w io.Writer, results []*targetResult, cfg config) {
	cpuTable(w, "CPU per operation, server / harness (the lowest of the rounds; a PostgreSQL or MySQL target's server CPU includes its database server's; the harness shares the servers' cores):", "target", cfg)
	for _, tr := range results {
		for _, c := range cfg.clients {
			b := tr.level(c)
			if !b.ok {
				continue
			}
			row := fmt.Sprintf("| %s | %d | %s | %s | %s | %s |", tr.t.name, c,
				fmtCPU(b.createCPU, b.createH), fmtCPU(b.updateCPU, b.updateH), fmtCPU(b.getCPU, b.getH), fmtCPU(b.listCPU, b.listH))
			if cfg.list100k {
				row += " " + fmtCPU(b.bigCPU, b.bigH) + " |"
			}
			fmt.Fprintln(w, row)
		}
	}
}

// printCPURatios compares the servers' CPU per operation, peer ÷
// QuantyKube, the pairs the rate ratios compare.
func printCPURatios(w io.Writer, qks, peers []*targetResult, cfg config) {
	cpuTable(w, "Server CPU per operation from this run, peer ÷ QuantyKube (above 1x QuantyKube uses less):", "QuantyKube vs peer", cfg)
	comparePairs(qks, peers, cfg, func(q, p *targetResult, c int, a, b best) {
		row := fmt.Sprintf("| %s vs %s | %d | %s | %s | %s | %s |", q.t.name, p.t.name, c,
			ratio(a.createCPU, b.createCPU, false), ratio(a.updateCPU, b.updateCPU, false),
			ratio(a.getCPU, b.getCPU, false), ratio(a.listCPU, b.listCPU, false))
		if cfg.list100k {
			row += " " + ratio(a.bigCPU, b.bigCPU, false) + " |"
		}
		fmt.Fprintln(w, row)
	})
}

func maxRounds(results []*targetResult) int {
	n := 0
	for _, tr := range results {
		n = max(n, len(tr.rounds))
	}
	return n
}

func firstErr(tr *targetResult) string {
	for _, rr := range tr.rounds {
		if rr.err != nil {
			s := rr.err.Error()
			if i := strings.IndexByte(s, '\n'); i >= 0 {
				s = s[:i]
			}
			return s
		}
	}
	return "no result"
}

func dedupe(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// printPairedRatios prints, for each pair the ratios compare, the median
// over the rounds of each round's ratio, and its range. Both targets ran
// in every round, in alternating order (roundOrder), so a steady drift
// over the run cancels out of the median; the best-of figures above still
// favour whichever target ran at the ends of the run, first or last. An
// A/B between builds reads this table.
func printPairedRatios(w io.Writer, qks, peers []*targetResult, cfg config) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The same, round by round: the median of each round's ratio (min-max), rates and server CPU per operation:")
	fmt.Fprintln(w)
	hdr := "| QuantyKube vs peer | clients | rounds | create/s | update/s | get/s | list 500 /s | CPU create | CPU update | CPU get | CPU list 500 |"
	sep := "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	fmt.Fprintln(w, hdr)
	fmt.Fprintln(w, sep)
	type phase func(*levelResult) opStats
	phases := []phase{
		func(l *levelResult) opStats { return l.create },
		func(l *levelResult) opStats { return l.update },
		func(l *levelResult) opStats { return l.get },
		func(l *levelResult) opStats { return l.list },
	}
	comparePairs(qks, peers, cfg, func(q, p *targetResult, c int, _, _ best) {
		pairs := pairedLevels(q, p, c)
		row := fmt.Sprintf("| %s vs %s | %d | %d |", q.t.name, p.t.name, c, len(pairs))
		for _, cpu := range []bool{false, true} {
			for _, ph := range phases {
				var rs []float64
				for _, pr := range pairs {
					a, b := ph(pr[0]), ph(pr[1])
					if cpu {
						if x, y := a.perOp(a.serverCPU), b.perOp(b.serverCPU); x > 0 && y > 0 {
							rs = append(rs, y/x)
						}
					} else if x, y := a.rate(), b.rate(); x > 0 && y > 0 {
						rs = append(rs, x/y)
					}
				}
				row += " " + fmtMedian(rs) + " |"
			}
		}
		fmt.Fprintln(w, row)
	})
}

// pairedLevels is, for each round both targets finished, their results at
// c clients.
func pairedLevels(q, p *targetResult, c int) [][2]*levelResult {
	var out [][2]*levelResult
	for i := range min(len(q.rounds), len(p.rounds)) {
		a, b := q.rounds[i].at(c), p.rounds[i].at(c)
		if a != nil && b != nil {
			out = append(out, [2]*levelResult{a, b})
		}
	}
	return out
}

func (rr *roundResult) at(c int) *levelResult {
	if rr.err != nil {
		return nil
	}
	for _, l := range rr.levels {
		if l.clients == c {
			return l
		}
	}
	return nil
}

// fmtMedian is "median (min-max)" of rs, "–" for none.
func fmtMedian(rs []float64) string {
	if len(rs) == 0 {
		return "–"
	}
	slices.Sort(rs)
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	if len(rs) == 1 {
		return fmt.Sprintf("%.2fx", m)
	}
	return fmt.Sprintf("%.2fx (%.2f-%.2f)", m, rs[0], rs[len(rs)-1])
}
