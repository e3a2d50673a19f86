package mvcc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

func setOp(key, value string) *pb.RequestOp { return putOp([]byte(key), value, 0) }

// churnLog writes revisions that change one key, several keys at once, and
// delete keys, under /s/a/ and /s/b/, with a key outside them.
func churnLog(t *testing.T, s *mvcc.Store) {
	t.Helper()
	for i := range 40 {
		switch i % 4 {
		case 0:
			txn(t, s, setOp(fmt.Sprintf("/s/a/%d", i%7), fmt.Sprint("v", i)))
		case 1:
			txn(t, s, setOp(fmt.Sprintf("/s/a/%d", i%5), fmt.Sprint("w", i)), setOp(fmt.Sprintf("/s/b/%d", i%3), fmt.Sprint("x", i)), setOp("/t/z", fmt.Sprint(i)))
		case 2:
			txn(t, s, delOp(fmt.Sprintf("/s/a/%d", (i+3)%7)))
		case 3:
			txn(t, s, setOp(fmt.Sprintf("/s/b/%d", i%4), strings.Repeat("y", i)))
		}
	}
}

// allPages pages q through to its end and returns every entry, with the
// number of pages it took.
func allPages(t *testing.T, s *mvcc.Store, q mvcc.LogQuery) ([]*mvcc.Event, int) {
	t.Helper()
	var all []*mvcc.Event
	pages := 0
	for {
		page, err := s.Log(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, page.Events...)
		if !page.More {
			return all, pages
		}
		if pages > 10000 {
			t.Fatal("paging does not end")
		}
		q.After = page.Next
	}
}

func sameEvents(t *testing.T, what string, got, want []*mvcc.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Type != w.Type || g.UnixMs != w.UnixMs || !proto.Equal(g.Kv, w.Kv) || !proto.Equal(g.PrevKv, w.PrevKv) {
			t.Fatalf("%s: entry %d is %v %v prev %v, want %v %v prev %v", what, i, g.Type, g.Kv, g.PrevKv, w.Type, w.Kv, w.PrevKv)
		}
	}
}

// Descending pages list exactly the ascending pages' entries, newest
// first, for a wide range, a narrow one and one key; end bounds cut both
// orders at the same revision, and a start bound still counts from the
// oldest.
func TestLogDescendingAndEndBounds(t *testing.T) {
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		churnLog(t, s)
		for _, tc := range []struct {
			name   string
			kr     mvcc.KeyRange
			narrow int
		}{
			{"wide", mvcc.PrefixRange([]byte("/s/")), 0},
			{"narrow", mvcc.PrefixRange([]byte("/s/")), 2048},
			{"key", mvcc.NewKeyRange([]byte("/s/a/1"), nil), 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				defer mvcc.SetNarrowRange(tc.narrow)()
				asc, _ := allPages(t, s, mvcc.LogQuery{Range: tc.kr, Limit: 1000})
				if len(asc) < 5 {
					t.Fatalf("only %d changes", len(asc))
				}
				for _, limit := range []int{1, 3, 7, 1000} {
					desc, _ := allPages(t, s, mvcc.LogQuery{Range: tc.kr, Descending: true, Limit: limit})
					slices.Reverse(desc)
					sameEvents(t, fmt.Sprintf("descending, limit %d", limit), desc, asc)
				}
				// [from, to] in both orders: the ascending entries in it.
				from, to := asc[1].Rev(), asc[len(asc)-2].Rev()
				var want []*mvcc.Event
				for _, e := range asc {
					if e.Rev() >= from && e.Rev() <= to {
						want = append(want, e)
					}
				}
				up, _ := allPages(t, s, mvcc.LogQuery{Range: tc.kr, FromRev: from, ToRev: to, Limit: 2})
				sameEvents(t, "ascending, bounded", up, want)
				down, _ := allPages(t, s, mvcc.LogQuery{Range: tc.kr, FromRev: from, ToRev: to, Descending: true, Limit: 2})
				slices.Reverse(down)
				sameEvents(t, "descending, bounded", down, want)
				// An end past the store's revision is the store's revision.
				past, _ := allPages(t, s, mvcc.LogQuery{Range: tc.kr, ToRev: s.Rev() + 100, Descending: true, Limit: 1000})
				slices.Reverse(past)
				sameEvents(t, "descending, end in the future", past, asc)
			})
		}
	})
}

// Keep decides on a row's key before its value is read: a Log that keeps
// only small keys among 40 revisions of 1 MiB allocates about its small
// page, and lists exactly the kept keys' changes, prev_kvs included.
func TestLogKeepReadsNoFilteredValue(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 40 MiB")
	}
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		ctx := context.Background()
		for i := range 40 {
			put(t, s, "/f/big", bytes.Repeat([]byte{byte(i)}, 1<<20))
			put(t, s, fmt.Sprintf("/f/small/%d", i%3), []byte(fmt.Sprint("s", i)))
		}
		kr := mvcc.PrefixRange([]byte("/f/"))
		keep := func(k []byte, _ int64) mvcc.Verdict { return verdict(!bytes.Equal(k, []byte("/f/big"))) }
		all, _ := allPages(t, s, mvcc.LogQuery{Range: kr, Limit: 1000})
		var want []*mvcc.Event
		for _, e := range all {
			if keep(e.Kv.Key, e.Rev()) == mvcc.Take {
				want = append(want, e)
			}
		}
		for _, desc := range []bool{false, true} {
			q := mvcc.LogQuery{Range: kr, Keep: keep, Descending: desc, Limit: 1000, MaxBytes: 3 << 20}
			var page *mvcc.LogPage
			got := allocated(func() {
				var err error
				if page, err = s.Log(ctx, q); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("descending %v: %d entries; allocated %d bytes", desc, len(page.Events), got)
			if page.More {
				t.Fatalf("descending %v: more after %d entries", desc, len(page.Events))
			}
			evs := page.Events
			if desc {
				slices.Reverse(evs)
			}
			sameEvents(t, fmt.Sprintf("descending %v", desc), evs, want)
			if got > 512<<10 {
				t.Errorf("descending %v: allocated %d bytes for %d small entries: filtered values were read", desc, got, len(evs))
			}
		}
	})
}

// A page reads at most the scan bound's rows: one whose filter keeps
// none of them ends there, empty, with a continue token that goes on
// after the rows read, and the client reaches every kept change.
func TestLogScanBoundReturnsContinue(t *testing.T) {
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		defer mvcc.SetScanBounds(20, 20)()
		put(t, s, "/g/kept", []byte("first"))
		for i := range 100 {
			put(t, s, fmt.Sprintf("/g/other/%d", i%10), []byte("x"))
		}
		put(t, s, "/g/kept", []byte("last"))
		kr := mvcc.PrefixRange([]byte("/g/"))
		keep := func(k []byte, _ int64) mvcc.Verdict { return verdict(bytes.HasPrefix(k, []byte("/g/kept"))) }
		for _, desc := range []bool{false, true} {
			q := mvcc.LogQuery{Range: kr, Keep: keep, Descending: desc, Limit: 10}
			page, err := s.Log(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) != 1 || !page.More {
				t.Fatalf("descending %v: first page has %d entries, more %v; want the one in the first 20 rows, and more", desc, len(page.Events), page.More)
			}
			q.After = page.Next
			page, err = s.Log(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) != 0 || !page.More {
				t.Fatalf("descending %v: second page has %d entries, more %v; want none and more", desc, len(page.Events), page.More)
			}
			evs, pages := allPages(t, s, mvcc.LogQuery{Range: kr, Keep: keep, Descending: desc, Limit: 10})
			if len(evs) != 2 || pages < 102/20 {
				t.Fatalf("descending %v: %d entries in %d pages, want 2 in at least %d", desc, len(evs), pages, 102/20)
			}
		}
	})
}

// verdict is Take for true, Skip for false.
func verdict(take bool) mvcc.Verdict {
	if take {
		return mvcc.Take
	}
	return mvcc.Skip
}

// A filter that stops ends its page before the row it stopped at, and the
// next page starts there: the pages together list every row the filter
// takes, in order, none twice; a filter that stops at a page's first row
// is an error, not a page that repeats itself.
func TestLogKeepStops(t *testing.T) {
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		for i := range 30 {
			put(t, s, fmt.Sprintf("/h/%d", i%7), []byte(fmt.Sprint(i)))
		}
		kr := mvcc.PrefixRange([]byte("/h/"))
		all, _ := allPages(t, s, mvcc.LogQuery{Range: kr, Limit: 1000})
		for _, desc := range []bool{false, true} {
			// Each page stops at its fourth distinct key, as a filter with
			// three questions to ask per page would.
			var got []*mvcc.Event
			q := mvcc.LogQuery{Range: kr, Descending: desc, Limit: 100}
			for pages := 0; ; pages++ {
				if pages > 30 {
					t.Fatalf("descending %v: more than 30 pages", desc)
				}
				seen := map[string]bool{}
				q.Keep = func(k []byte, _ int64) mvcc.Verdict {
					if !seen[string(k)] && len(seen) == 3 {
						return mvcc.Stop
					}
					seen[string(k)] = true
					return mvcc.Take
				}
				page, err := s.Log(context.Background(), q)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Events) == 0 || len(page.Events) > 3*5 {
					t.Fatalf("descending %v: a page of %d entries", desc, len(page.Events))
				}
				got = append(got, page.Events...)
				if !page.More {
					break
				}
				q.After = page.Next
			}
			if desc {
				slices.Reverse(got)
			}
			sameEvents(t, fmt.Sprintf("descending %v", desc), got, all)
			stop := mvcc.LogQuery{Range: kr, Descending: desc, Limit: 100, Keep: func([]byte, int64) mvcc.Verdict { return mvcc.Stop }}
			if _, err := s.Log(context.Background(), stop); err == nil {
				t.Errorf("descending %v: a filter that stops at the first row: no error", desc)
			}
		}
	})
}

// RangeAt lists what etcd's Range at the same revision lists, for every
// revision, in pages of any size, and with a scan bound that ends pages
// early among deleted keys.
func TestRangeAtMatchesRangeAtRevision(t *testing.T) {
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		churnLog(t, s)
		ctx := context.Background()
		kr := mvcc.PrefixRange([]byte("/s/"))
		for _, bound := range []int{10000, 2} {
			restore := mvcc.SetScanBounds(10000, bound)
			for rev := int64(1); rev <= s.Rev(); rev++ {
				want, err := s.Range(ctx, &pb.RangeRequest{Key: kr.Key, RangeEnd: kr.End, Revision: rev})
				if err != nil {
					t.Fatal(err)
				}
				for _, limit := range []int{1, 3, 500} {
					var got []*mvccpb.KeyValue
					q := mvcc.RangeAtQuery{Range: kr, Rev: rev, Limit: limit, MaxBytes: 3 << 20}
					for pages := 0; ; pages++ {
						page, err := s.RangeAt(ctx, q)
						if err != nil {
							t.Fatal(err)
						}
						if len(page.Kvs) > limit {
							t.Fatalf("rev %d limit %d: a page of %d", rev, limit, len(page.Kvs))
						}
						got = append(got, page.Kvs...)
						if !page.More {
							break
						}
						if pages > 1000 {
							t.Fatal("paging does not end")
						}
						q.After = page.Next
					}
					if len(got) != len(want.Kvs) {
						t.Fatalf("scan bound %d, rev %d, limit %d: %d keys, want %d", bound, rev, limit, len(got), len(want.Kvs))
					}
					for i := range got {
						if !proto.Equal(got[i], want.Kvs[i]) {
							t.Fatalf("scan bound %d, rev %d, limit %d: key %d is %v, want %v", bound, rev, limit, i, got[i], want.Kvs[i])
						}
					}
				}
			}
			restore()
		}
		if _, err := s.RangeAt(ctx, mvcc.RangeAtQuery{Range: kr, Rev: s.Rev() + 1, Limit: 1}); err == nil {
			t.Fatal("a future revision was read")
		}
	})
}

// A filtered Log starts below a rule's floor only if it lists none of
// that rule's keys from below it: a window the kept keys are all retained
// for is listed, one that holds a key of shorter retention is refused
// naming its prefix (an unfiltered Log over both is refused, as before).
func TestLogKeepChecksEachKeysFloor(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	opts := mvcc.Options{Now: clock.Now, RetainPrefixes: []mvcc.RetentionRule{{Prefix: []byte("/r/short/"), Retain: mvcc.MinRetain}}, PruneInterval: time.Hour}
	onBackends(t, opts, func(t *testing.T, s *mvcc.Store) {
		ctx := context.Background()
		for i := range 5 {
			put(t, s, "/r/short/a", []byte(fmt.Sprint("s", i)))
			put(t, s, "/r/long/b", []byte(fmt.Sprint("l", i)))
		}
		clock.Advance(2 * mvcc.MinRetain)
		put(t, s, "/r/short/a", []byte("late"))
		put(t, s, "/r/long/b", []byte("late"))
		if _, err := s.Prune(ctx); err != nil {
			t.Fatal(err)
		}
		kr := mvcc.PrefixRange([]byte("/r/"))
		long := func(k []byte, _ int64) mvcc.Verdict { return verdict(bytes.HasPrefix(k, []byte("/r/long/"))) }
		for _, desc := range []bool{false, true} {
			evs, _ := allPages(t, s, mvcc.LogQuery{Range: kr, FromRev: 2, Keep: long, Descending: desc, Limit: 3})
			if len(evs) != 6 {
				t.Errorf("descending %v: %d changes of /r/long/b, want 6", desc, len(evs))
			}
			_, err := s.Log(ctx, mvcc.LogQuery{Range: kr, FromRev: 2, Keep: func([]byte, int64) mvcc.Verdict { return mvcc.Take }, Descending: desc, Limit: 1000})
			var oor *mvcc.OutOfRangeError
			if !errors.As(err, &oor) || !strings.Contains(oor.Msg, `"/r/short/"`) {
				t.Errorf("descending %v: a window below /r/short/'s floor that lists its key: %v", desc, err)
			}
		}
		if _, err := s.Log(ctx, mvcc.LogQuery{Range: kr, FromRev: 2, Limit: 1000}); err == nil {
			t.Error("an unfiltered Log below a rule's floor was answered")
		}
		if _, _, err := s.FirstRevisionFrom(ctx, kr, 1_800_000_000_000, true); err != nil {
			t.Errorf("a filtered Log's start at the first write: %v", err)
		}
	})
}

// A page of a wide range read in the log's order walks at most the scan
// bound's rows of the log, in its range or not: a range whose changes lie
// beyond that many rows of others gets empty pages with continue tokens
// until it reaches them, in either order, with a filter or without; the
// pages together list exactly the range's changes.
func TestLogWideRangeWalksABoundedWindow(t *testing.T) {
	onBackends(t, mvcc.Options{}, func(t *testing.T, s *mvcc.Store) {
		defer mvcc.SetNarrowRange(4)()
		defer mvcc.SetScanBounds(20, 20)()
		for i := range 10 {
			put(t, s, fmt.Sprintf("/w/sparse/%d", i), []byte("early"))
		}
		for i := range 60 {
			put(t, s, fmt.Sprintf("/w/busy/%d", i%7), []byte("x"))
		}
		for i := range 10 {
			put(t, s, fmt.Sprintf("/w/sparse/%d", i), []byte("late"))
		}
		kr := mvcc.PrefixRange([]byte("/w/sparse/"))
		want, _ := allPages(t, s, mvcc.LogQuery{Range: kr, Limit: 1000, Keep: func([]byte, int64) mvcc.Verdict { return mvcc.Take }})
		if len(want) != 20 {
			t.Fatalf("%d changes of the sparse range, want 20", len(want))
		}
		for _, tc := range []struct {
			name string
			q    mvcc.LogQuery
		}{
			{"in order", mvcc.LogQuery{Range: kr, Limit: 1000}},
			{"newest first", mvcc.LogQuery{Range: kr, Limit: 1000, Descending: true}},
			{"filtered", mvcc.LogQuery{Range: kr, Limit: 1000, Keep: func([]byte, int64) mvcc.Verdict { return mvcc.Take }}},
		} {
			q := tc.q
			q.After = mvcc.LogCursor{Rev: want[9].Rev()}
			if q.Descending {
				q.After = mvcc.LogCursor{Rev: want[10].Rev()}
			}
			page, err := s.Log(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) != 0 || !page.More {
				t.Errorf("%s: the page after the first ten has %d entries (more %v); want none within 20 rows of the busy keys, and more", tc.name, len(page.Events), page.More)
			}
			got, pages := allPages(t, s, tc.q)
			if tc.q.Descending {
				slices.Reverse(got)
			}
			sameEvents(t, tc.name, got, want)
			if pages < 80/20 {
				t.Errorf("%s: %d pages over 80 rows, want at least %d of at most 20 rows each", tc.name, pages, 80/20)
			}
		}
	})
}
