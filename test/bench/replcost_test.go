package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// The replicator's counters are read from the server's own /metrics
// handler: the objects of every kind summed, the other samples as they
// are, and nothing else.
func TestScrapeReplicate(t *testing.T) {
	metrics.ReplicateObjects.WithLabelValues("base").Add(2)
	metrics.ReplicateObjects.WithLabelValues("segment").Add(40)
	metrics.ReplicateBytes.Add(12345)
	metrics.ReplicateLagRevisions.Set(7)
	srv := httptest.NewServer(metrics.Handler())
	defer srv.Close()
	m, err := scrapeReplicate(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"quantykube_replicate_objects_total": 42,
		"quantykube_replicate_bytes_total":   12345,
		"quantykube_replicate_lag_revisions": 7,
		"quantykube_replicate_errors_total":  0,
		"quantykube_replicate_lag_seconds":   0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	for name := range m {
		if !strings.HasPrefix(name, "quantykube_replicate_") {
			t.Errorf("%s scraped", name)
		}
	}
}
