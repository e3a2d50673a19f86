package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/pkg/endpoint"
)

// StatusCommand is `quantykube status`.
type StatusCommand struct{}

// Usage is status's help.
func (StatusCommand) Usage() string {
	return `quantykube status [--metrics-address HOST:PORT [--objects N] | --endpoint DSN [-o text|json]]

Prints what a running server holds in memory, from its metrics endpoint
(serve --metrics-listen-address): its resident memory, the live keys and
their values' bytes, and what the live index holds of them: every key's row
and the values that fit --live-index-value-bytes (docs/adr/041). With
--objects N it also says what the index would hold at N live keys of the
same average size (docs/GROWING.md sizes a node with it).

With --endpoint it reads the store's database instead, read-only, whether
or not a server runs on it: the revision, the floors, the live keys and
their bytes with the state hash (check hash), the log's rows and bytes,
leases, the schema version, the database's size and the servers that
announce themselves in it (docs/OPERATIONS.md). It reads every live value
and the log's sizes once.`
}

// Run reads the metrics once and prints them.
func (c StatusCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	addr := fs.String("metrics-address", "127.0.0.1:2381", "the server's --metrics-listen-address (host:port, or an http:// URL)")
	objects := fs.Int64("objects", 0, "also estimate the live index at this many live keys (0: no estimate)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the metrics")
	var cfg endpoint.Config
	registerDatastoreFlags(fs, &cfg, "read the store's database instead of a server's metrics (default: none, the metrics)")
	fs.Lookup("endpoint").DefValue, cfg.Endpoint = "", ""
	output := fs.StringP("output", "o", "text", "with --endpoint: text or json")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("status takes no arguments, got %q", fs.Args())
	}
	if fs.Changed("endpoint") {
		for _, f := range []string{"metrics-address", "objects", "timeout"} {
			if fs.Changed(f) {
				return fmt.Errorf("--endpoint reads the database, --%s a server's metrics: give one of them", f)
			}
		}
		return storeStatus(ctx, cfg, *output, stdout)
	}
	if fs.Changed("output") {
		return errors.New("-o is --endpoint's: the metrics' status is text")
	}
	if *objects < 0 {
		return fmt.Errorf("--objects %d: want a count of keys", *objects)
	}
	url := *addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimSuffix(url, "/") + "/metrics"
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("--metrics-address: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("read the server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("read the server's metrics: GET %s: %s", url, resp.Status)
	}
	m, err := readGauges(resp.Body)
	if err != nil {
		return fmt.Errorf("read the server's metrics: %w", err)
	}
	return printStatus(stdout, m, *objects)
}

// readGauges reads the unlabelled samples of Prometheus' text format.
func readGauges(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("sample %q: %w", line, err)
		}
		out[f[0]] = v
	}
	return out, sc.Err()
}

// printStatus writes the status read from metrics m, and the estimate at
// objects live keys (0: none).
func printStatus(w io.Writer, m map[string]float64, objects int64) error {
	need := []string{"quantykube_revision", "quantykube_live_index_keys", "quantykube_live_index_bytes",
		"quantykube_live_index_value_bytes", "quantykube_live_value_bytes", "quantykube_live_index_value_budget_bytes"}
	for _, n := range need {
		if _, ok := m[n]; !ok {
			return fmt.Errorf("the metrics have no %s: not a quantykube server, or an older one", n)
		}
	}
	keys := m["quantykube_live_index_keys"]
	all, held := m["quantykube_live_index_bytes"], m["quantykube_live_index_value_bytes"]
	live, budget := m["quantykube_live_value_bytes"], m["quantykube_live_index_value_budget_bytes"]
	tw := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-22s "+format+"\n", append([]any{name}, args...)...)
	}
	tw("revision", "%.0f", m["quantykube_revision"])
	if rss, ok := m["process_resident_memory_bytes"]; ok {
		tw("resident memory", "%s", size(rss))
	}
	if shipped := m["quantykube_replicate_shipped_revision"]; shipped > 0 {
		state := "shipping"
		if m["quantykube_replicate_failing"] == 1 {
			state = "failing (the server's log says why)"
		}
		tw("replicated", "to revision %.0f, %.0f revisions (%.1fs) behind, %s shipped, %.0f failed intervals: %s",
			shipped, m["quantykube_replicate_lag_revisions"], m["quantykube_replicate_lag_seconds"], size(m["quantykube_replicate_bytes_total"]), m["quantykube_replicate_errors_total"], state)
	}
	if all == 0 {
		tw("live index", "none: reads at the latest revision go to the database (--live-index=false, or the rows outgrew --live-index-bytes)")
		return nil
	}
	perRow, perValue := (all-held)/keys, live/keys
	if keys == 0 {
		perRow, perValue = 0, 0
	}
	tw("live keys", "%.0f, values %s (%s a key)", keys, size(live), size(perValue))
	tw("live index", "%s: rows %s (%s a key), values %s of a %s budget (%.0f%% of the live values)",
		size(all), size(all-held), size(perRow), size(held), size(budget), 100*held/max(live, 1))
	if objects > 0 {
		if keys == 0 {
			tw(fmt.Sprintf("at %d keys", objects), "unknown: no live key to take sizes from")
			return nil
		}
		n := float64(objects)
		rows, values := n*perRow, min(budget, n*perValue)
		tw(fmt.Sprintf("at %d keys", objects), "about %s: rows %s, values %s (keys and values of today's average size)", size(rows+values), size(rows), size(values))
	}
	return nil
}

// size is bytes in the units `kubectl top` uses.
func size(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
