// Package metrics holds QuantyKube's Prometheus metrics, served by
// `quantykube serve --metrics-listen-address` at /metrics.
package metrics

import (
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is the process's registry: one QuantyKube per process.
var Registry = prometheus.NewRegistry()

var (
	// WriteBatchSize is how many requests shared one commit.
	WriteBatchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "quantykube_write_batch_size",
		Help:    "Requests committed together in one database transaction (group commit).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
	})
	// CommitSeconds is one batch's time in the writer: BEGIN, its
	// requests, COMMIT and publishing, failed batches included.
	CommitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "quantykube_write_batch_seconds",
		Help:    "Time to apply, durably commit and publish one write batch (failed ones included).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	// CommitFailures counts batches the database refused.
	CommitFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_write_batch_failures_total",
		Help: "Write batches the database refused or that failed to commit.",
	})
	// AssumedBatches counts write batches on a shared database
	// (PostgreSQL, MySQL) that began from the rows the writer remembers
	// instead of a read (ADR-007, "One round trip"), by how each ended.
	AssumedBatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quantykube_write_batch_assumed_total",
		Help: "Write batches on a shared database (PostgreSQL, MySQL) evaluated from the rows this replica remembers: sent in one round trip (one_trip), needing a read after all (read), or finding the database changed and run again (missed).",
	}, []string{"result"})
	// PrunedRows counts log rows retention removed.
	PrunedRows = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_retention_pruned_rows_total",
		Help: "Log rows removed by retention.",
	})
	// HistoryBytes is what each retention rule's budget counts now
	// (docs/adr/030): its changes above its floor and the states they
	// replaced. One series per rule: a handful.
	HistoryBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quantykube_history_bytes",
		Help: "Bytes of history a retention rule with a byte budget keeps: its changes above its floor and the states they replaced, keys and values.",
	}, []string{"rule"})
	// HistoryWindow is how far back each rule's history reaches now.
	HistoryWindow = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quantykube_history_window_seconds",
		Help: "How far back History reaches now under a retention rule: the age of its floor (by time or by its byte budget, whichever is higher).",
	}, []string{"rule"})
	// Watchers is the number of open watches.
	Watchers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_watchers",
		Help: "Open watches on all streams.",
	})
	// WatchLogReads counts catch-up reads served from the log table because
	// the in-memory ring no longer held the events.
	WatchLogReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_watch_log_reads_total",
		Help: "Watch catch-up reads that went to the database instead of the in-memory ring.",
	})
	// RevisionRegressions counts the times this process found the
	// database behind a revision it had acknowledged or shown (a failover
	// to a standby that had not received every commit) and moved the
	// database's revision past it (ADR-027).
	RevisionRegressions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_revision_regressions_total",
		Help: "Times the database was found behind a revision this process had acknowledged or shown (committed transactions lost, as in a failover to a standby that was behind), and its revision moved past it.",
	})
	// RevisionsLost adds up, over those times, how many acknowledged or
	// shown revisions the database no longer had.
	RevisionsLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_revisions_lost_total",
		Help: "Revisions this process had acknowledged or shown that the database no longer held when it was found behind them.",
	})
	// LiveIndexBytes is what the live index holds (0: none).
	LiveIndexBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_live_index_bytes",
		Help: "Approximate bytes held by the in-memory index of the live keys, its rows and the values it holds; 0 when reads at the latest revision go to the database.",
	})
	// LiveIndexKeys is the live keys the index holds (every one, while it
	// serves).
	LiveIndexKeys = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_live_index_keys",
		Help: "Live keys in the in-memory index; 0 when reads at the latest revision go to the database. Its rows cost (quantykube_live_index_bytes - quantykube_live_index_value_bytes) / quantykube_live_index_keys each.",
	})
	// LiveIndexValueBytes is the part of LiveIndexBytes that is values.
	LiveIndexValueBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_live_index_value_bytes",
		Help: "Bytes of values the live index holds, at most --live-index-value-bytes; the other live keys' values are read from the database when asked for.",
	})
	// LiveValueBytes is the live keys' values, held by the index or not.
	LiveValueBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_live_value_bytes",
		Help: "Bytes of the live keys' values (the live index's count, held or not); 0 when no live index serves.",
	})
	// LiveIndexValueBudget is --live-index-value-bytes.
	LiveIndexValueBudget = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_live_index_value_budget_bytes",
		Help: "The most bytes of values the live index holds (--live-index-value-bytes).",
	})
	// LiveIndexColdReads counts values read from the database because the
	// live index did not hold them.
	LiveIndexColdReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_live_index_cold_reads_total",
		Help: "Values the live index did not hold and read from the database for an answer or a write's prev_kv.",
	})
)

// own are QuantyKube's collectors, without the Go runtime's and the
// process's.
var own = []prometheus.Collector{
	WriteBatchSize, CommitSeconds, CommitFailures, AssumedBatches, PrunedRows, HistoryBytes, HistoryWindow, HistoryTypes, Watchers, WatchLogReads, LiveIndexBytes, LiveIndexKeys, LiveIndexValueBytes, LiveValueBytes, LiveIndexValueBudget, LiveIndexColdReads,
	RevisionRegressions, RevisionsLost,
	ReplicateLagRevisions, ReplicateLagSeconds, ReplicateShippedRevision, ReplicateBytes, ReplicateObjects, ReplicateFailing, ReplicateErrors,
	gaugeFunc("quantykube_revision", "The newest committed revision.", Source.Rev),
	gaugeFunc("quantykube_etcd_floor_revision", "The etcd API's floor: the higher of Compact's and retention's.", Source.Floor),
	gaugeFunc("quantykube_retention_floor_revision", "The highest retention floor.", Source.RetainFloor),
	gaugeFunc("quantykube_leases", "Live leases.", func(s Source) int64 { return int64(s.LeaseCount()) }),
	// etcd's etcd_server_quota_backend_bytes, the database size it is
	// compared with, and its NOSPACE alarm (ADR-049).
	gaugeFunc("quantykube_quota_backend_bytes", "The space quota, --quota-backend-bytes (0: none).", Source.QuotaBytes),
	gaugeFunc("quantykube_quota_db_size_bytes", "The database size the quota compares, as last measured (0 without a quota).", Source.QuotaSize),
	gaugeFunc("quantykube_alarm_nospace", "1 while a NOSPACE alarm is active: writes that grow the store are refused.", Source.NoSpace),
}

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	Registry.MustRegister(own...)
}

// RegisterOn adds QuantyKube's collectors to an embedding program's
// registry (pkg/endpoint's MetricsRegisterer); registering twice is not an
// error.
func RegisterOn(r prometheus.Registerer) error {
	for _, c := range own {
		if err := r.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// Source is the store the gauges read.
type Source interface {
	Rev() int64
	Floor() int64
	RetainFloor() int64
	LeaseCount() int
	QuotaBytes() int64
	QuotaSize() int64
	NoSpace() int64
}

var source atomic.Pointer[Source]

// SetSource points the gauges at a store (the last one set, in tests that
// run several).
func SetSource(s Source) { source.Store(&s) }

func gaugeFunc(name, help string, f func(Source) int64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
		if s := source.Load(); s != nil {
			return float64(f(*s))
		}
		return 0
	})
}

// Handler serves the registry.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{})
}

// TypeUsage is the retained history of one resource type (or "other",
// the types past the largest), as `quantykube history top` counts it.
type TypeUsage struct {
	Type                       string
	Bytes, Revisions, LastHour int64
}

// HistoryTypes is the retained history by resource type: a snapshot set
// whole by each refresh (pkg/history's ReportTypes), so that a type that
// drops out of the largest leaves no stale series behind.
var HistoryTypes = &typeCollector{
	bytes: prometheus.NewDesc("quantykube_history_type_bytes",
		"Bytes (keys and values) of the log rows a resource type holds, live rows included, as `quantykube history top` counts them; the largest types by bytes, the rest under type=\"other\".", []string{"type"}, nil),
	revisions: prometheus.NewDesc("quantykube_history_type_revisions",
		"Log rows (retained revisions, live rows included) a resource type holds; the same types as quantykube_history_type_bytes.", []string{"type"}, nil),
	lastHour: prometheus.NewDesc("quantykube_history_type_revisions_last_hour",
		"A resource type's revisions committed in the hour before the last refresh; the same types as quantykube_history_type_bytes.", []string{"type"}, nil),
	scan: prometheus.NewDesc("quantykube_history_type_scan_seconds",
		"How long the last refresh of the quantykube_history_type_* metrics took: one pass over the log's row sizes.", nil, nil),
}

type typeCollector struct {
	bytes, revisions, lastHour, scan *prometheus.Desc
	mu                               sync.Mutex
	types                            []TypeUsage
	took                             float64
	set                              bool
}

// Set replaces the snapshot: types, and how long reading it took.
func (c *typeCollector) Set(types []TypeUsage, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.types, c.took, c.set = slices.Clone(types), took.Seconds(), true
}

func (c *typeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.bytes
	ch <- c.revisions
	ch <- c.lastHour
	ch <- c.scan
}

func (c *typeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set {
		return
	}
	for _, t := range c.types {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(t.Bytes), t.Type)
		ch <- prometheus.MustNewConstMetric(c.revisions, prometheus.GaugeValue, float64(t.Revisions), t.Type)
		ch <- prometheus.MustNewConstMetric(c.lastHour, prometheus.GaugeValue, float64(t.LastHour), t.Type)
	}
	ch <- prometheus.MustNewConstMetric(c.scan, prometheus.GaugeValue, c.took)
}
