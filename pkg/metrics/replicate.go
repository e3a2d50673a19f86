package metrics

import "github.com/prometheus/client_golang/prometheus"

// Replication to object storage (serve --replicate, pkg/replicate): set
// by the replicator after each interval's work, the lag gauges also every
// second while that work waits on the object store; zero without it.
var (
	ReplicateLagRevisions = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_replicate_lag_revisions",
		Help: "Committed revisions not yet in the object store.",
	})
	ReplicateLagSeconds = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_replicate_lag_seconds",
		Help: "How long the oldest revision not yet in the object store has waited (0 when none waits).",
	})
	ReplicateShippedRevision = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_replicate_shipped_revision",
		Help: "The newest revision in the object store.",
	})
	ReplicateBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_replicate_bytes_total",
		Help: "Bytes written to the object store (bases and segments, compressed).",
	})
	ReplicateObjects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quantykube_replicate_objects_total",
		Help: "Objects written to the object store, by kind (base, segment).",
	}, []string{"kind"})
	ReplicateFailing = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quantykube_replicate_failing",
		Help: "1 while the last interval's replication work failed (its error is in the log), else 0.",
	})
	ReplicateErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quantykube_replicate_errors_total",
		Help: "Intervals whose replication work failed (the object store down, slow or refusing); retried the next interval.",
	})
)
