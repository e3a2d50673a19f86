package main

// The changes window read one resource at a time, when QuantyKube refuses
// it whole. A Log over a range answers from the highest retention floor
// among the rules its keys fall under (pkg/mvcc rangeFloor), and the
// whole store's range falls under every rule: with its default
// --retain-prefix (leases, ten minutes), any window older than ten
// minutes is refused for the range, though every other resource holds
// it. A request naming one resource (in one namespace, if given) reads
// that resource's range alone (pkg/apiagg narrowToScope), under its own
// rule: so the plugin asks again resource by resource, and merges. A
// resource whose own rule is shorter than the window is listed from its
// floor on, and named; when every one is, the window itself is outside
// the retention, and that is the error.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"
)

// oldestRetained reads the floor from QuantyKube's answer to a request
// older than it (pkg/mvcc's OutOfRangeError).
var oldestRetained = regexp.MustCompile(`oldest retained revision (\d+) \(([^)]*)\)`)

// splitResult is one resource's part of the window.
type splitResult struct {
	rows   []changeRow
	header int64
	floor  string // set when listed from its floor on, not the window's start
	err    error
}

// readChangesSplit reads q resource by resource and merges the rows in
// the order asked, up to q's limit.
func (s *session) readChangesSplit(ctx context.Context, q *changesQuery, whole error) ([]changeRow, int64, error) {
	names := q.params["resource"]
	if len(names) == 0 {
		all, err := s.disc.all(ctx)
		if err != nil {
			return nil, 0, err
		}
		seen := map[string]bool{}
		for _, r := range all {
			n := r.Resource.String()
			if seen[n] || slices.Contains(unlessNamed, n) || !r.Namespaced && q.params.Get("namespace") != "" {
				continue
			}
			seen[n] = true
			names = append(names, n)
		}
	}
	results := make([]splitResult, len(names))
	sem := make(chan struct{}, discoveryParallelism)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = s.readResourceChanges(ctx, q, name)
		}()
	}
	wg.Wait()
	var rows []changeRow
	var header int64
	var warnings []string
	outside := 0
	for i, r := range results {
		switch {
		case errors.Is(r.err, errForbidden):
			continue // a resource the caller may not list is left out, as the view leaves it
		case r.err != nil:
			return nil, 0, r.err
		case r.floor != "":
			outside++
			warnings = append(warnings, fmt.Sprintf("Warning: %s: QuantyKube keeps it for less than the window (--retain-prefix): listed from %s on.\n", names[i], r.floor))
		}
		rows = append(rows, r.rows...)
		header = max(header, r.header)
	}
	if outside == len(names) {
		return nil, 0, q.windowError(whole)
	}
	for _, w := range warnings {
		fmt.Fprint(s.errOut, w)
	}
	slices.SortStableFunc(rows, func(a, b changeRow) int {
		if q.req.Descending {
			return cmp.Compare(b.Revision, a.Revision)
		}
		return cmp.Compare(a.Revision, b.Revision)
	})
	if q.limit > 0 && len(rows) > q.limit {
		rows = rows[:q.limit]
	}
	return rows, header, nil
}

// readResourceChanges reads the window of one resource; one whose rule
// keeps less than the window, from its floor on.
func (s *session) readResourceChanges(ctx context.Context, q *changesQuery, name string) splitResult {
	one := &changesQuery{req: proto.CloneOf(q.req), params: url.Values{}, sel: q.sel, limit: q.limit, since: q.since, until: q.until}
	if ns := q.params.Get("namespace"); ns != "" {
		one.params.Set("namespace", ns)
	}
	one.params.Set("resource", name)
	rows, header, err := s.readChangesWhole(ctx, one)
	if !errors.Is(err, errOutsideRetention) {
		return splitResult{rows: rows, header: header, err: err}
	}
	m := oldestRetained.FindStringSubmatch(err.Error())
	if m == nil {
		return splitResult{err: err}
	}
	floor, _ := strconv.ParseInt(m[1], 10, 64)
	one.req.UnixMs, one.req.Revision = 0, floor
	rows, header, err = s.readChangesWhole(ctx, one)
	if errors.Is(err, errOutsideRetention) {
		err = nil // its window is past --until: nothing of it to list
	}
	return splitResult{rows: rows, header: header, err: err, floor: fmt.Sprintf("%s (revision %d)", m[2], floor)}
}
