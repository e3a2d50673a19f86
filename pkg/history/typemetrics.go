package history

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/pkg/metrics"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

const (
	// MetricTypes bounds the quantykube_history_type_* series: the
	// largest types by bytes, each its own series, and the rest summed as
	// "other". A cluster has 50 to 100 resource types, and a handful
	// (leases, events, endpointslices, pods, an operator's custom
	// resource) hold most of its history; 20 names each of those with room
	// to spare, at 3 x 21 series, fewer than one latency histogram, and
	// `quantykube history top --limit` lists the rest.
	MetricTypes = 20
	// OtherType names the types past the largest MetricTypes.
	OtherType = "other"
	// TypeRefreshMin is the least time between two refreshes, and
	// TypeRefreshShare the share of the time a refresh may take: it is
	// one pass over the log (Top's), which on SQLite reads every page of
	// it, values included (10^6 rows of 1 KiB: 6.6 s of CPU, 11 s under
	// load, BenchmarkTypeUsage), so the next waits 1/TypeRefreshShare
	// times as long as the last took: half a percent of the wall time,
	// under 1% of a core even when the garbage collector's share on
	// another core doubles its CPU; at 10^6 rows about every 20 minutes.
	TypeRefreshMin   = time.Minute
	TypeRefreshShare = 0.005
)

// TypeUsage is the retained history by resource type, as Top groups it,
// bounded for metrics: the limit largest types by bytes and, when there
// are more, the rest summed as OtherType.
func (s *Service) TypeUsage(ctx context.Context, limit int) ([]metrics.TypeUsage, error) {
	keys := storagekey.New(storagekey.DefaultPrefix)
	types := map[string]*metrics.TypeUsage{}
	err := s.store.Usage(ctx, time.Now().Add(-time.Hour).UnixMilli(), func(k mvcc.KeyUsage) error {
		typ, _ := groupsOf(keys, k.Key)
		t := types[typ]
		if t == nil {
			t = &metrics.TypeUsage{Type: typ}
			types[typ] = t
		}
		t.Bytes += k.Bytes
		t.Revisions += k.Revisions
		t.LastHour += k.RecentRevisions
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]metrics.TypeUsage, 0, len(types))
	for _, t := range types {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b metrics.TypeUsage) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		return strings.Compare(a.Type, b.Type)
	})
	if len(out) <= limit {
		return out, nil
	}
	other := metrics.TypeUsage{Type: OtherType}
	for _, t := range out[limit:] {
		other.Bytes += t.Bytes
		other.Revisions += t.Revisions
		other.LastHour += t.LastHour
	}
	return append(out[:limit], other), nil
}

// ReportTypes keeps the quantykube_history_type_* metrics current until
// done is closed: a refresh at once, then each after 1/TypeRefreshShare
// times as long as the last took, at least TypeRefreshMin apart.
func (s *Service) ReportTypes(done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		start := time.Now()
		types, err := s.TypeUsage(ctx, MetricTypes)
		took := time.Since(start)
		if err == nil {
			metrics.HistoryTypes.Set(types, took)
		}
		wait := max(time.Duration(float64(took)/TypeRefreshShare), TypeRefreshMin)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
