package mvcc

import (
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"time"
)

// A rule's byte budget (RetentionRule.MaxBytes, --retain-bytes): the
// history a rule keeps is bounded by size as well as by time, whichever
// is less. What a rule's floor F keeps is every change at or above F and
// the state each of them replaced (its prev_kv: History's diffs and a
// watcher's prev_kv need it); the budget counts both, key and value, as
// the log stores them. So the log holds about the live state plus the
// budget, whatever the write rate, and the floor rises, oldest changes
// first, as soon as the changes since it weigh more than the budget. The
// live state is never counted against it nor pruned: a write is never
// refused for lack of history space.
//
// The accounting is incremental: each pruning pass reads the sizes of
// the rows committed since the last, and keeps them per rule in buckets of
// budgetBucketRows rows (about 32 bytes per 256 changes retained), and
// each key's last change above the floor (about 50 bytes per key changed
// in the window). A restart reads the rows above the floor once, in the
// pruning loop.
type budget struct {
	max     int64
	buckets []budgetBucket // oldest first, all above the rule's floor
	total   int64          // bytes in buckets
	// last is each key's newest change above the floor, by its key's
	// hash: what the key's next change replaces.
	last map[uint64]lastChange
	seed maphash.Seed
}

type lastChange struct{ rev, size int64 }

// budgetBucket is a run of a rule's changes: revisions first to last.
type budgetBucket struct {
	first, last, rows, bytes int64
}

// budgetBucketRows is the rows per bucket: the floor a budget sets is a
// bucket's first revision, so it rises in steps of up to this many of the
// rule's changes.
const budgetBucketRows = 256

func newBudget(max int64) *budget {
	if max <= 0 {
		return nil
	}
	return &budget{max: max, last: map[uint64]lastChange{}, seed: maphash.MakeSeed()}
}

// change counts a change to key at rev, of size bytes; version and
// deleted are the log row's. What it replaced is the key's last change
// above the floor, or, when there is none, a state older than the floor
// of about the change's own size (an update rewrites the object; a
// delete's last state is not read, and only its key is counted).
func (b *budget) change(rev int64, key []byte, size, version int64, deleted bool) {
	h := maphash.Bytes(b.seed, key)
	prev, known := b.last[h]
	switch {
	case known:
	case deleted || version > 1:
		prev = lastChange{rev: 1, size: size}
	}
	if deleted {
		delete(b.last, h)
	} else {
		b.last[h] = lastChange{rev: rev, size: size}
	}
	b.add(rev, size, prev.rev, prev.size)
}

// add counts a change at rev of size bytes, which replaced a state of
// prevBytes committed at prevRev (0: none). The state it replaced counts
// only when it is older than the change's bucket: once the floor passes
// that state's own bucket it stays as this change's prev_kv, on this
// bucket's account; while both are kept it is counted twice, which errs
// towards pruning sooner.
func (b *budget) add(rev, bytes, prevRev, prevBytes int64) {
	n := len(b.buckets)
	if n == 0 || b.buckets[n-1].rows >= budgetBucketRows {
		b.buckets = append(b.buckets, budgetBucket{first: rev})
		n++
	}
	last := &b.buckets[n-1]
	if prevRev > 0 && prevRev < last.first {
		bytes += prevBytes
	}
	last.last, last.rows, last.bytes = rev, last.rows+1, last.bytes+bytes
	b.total += bytes
}

// floor is the lowest revision at or above which the rule's changes fit
// the budget (0: all of them do). The buckets below it go once pruning
// has raised the rule's floor to it (below).
func (b *budget) floor() int64 {
	total := b.total
	for i, bk := range b.buckets {
		if total <= b.max {
			if i == 0 {
				return 0
			}
			return bk.first
		}
		total -= bk.bytes
	}
	if n := len(b.buckets); n > 0 {
		// Even the newest bucket is over: keep its last change only.
		return b.buckets[n-1].last
	}
	return 0
}

// below drops what is below rev, the rule's floor now: the buckets wholly
// under it, and the keys whose last change is.
func (b *budget) below(rev int64) {
	drop := 0
	for drop < len(b.buckets) && b.buckets[drop].last < rev {
		b.total -= b.buckets[drop].bytes
		drop++
	}
	b.buckets = append(b.buckets[:0], b.buckets[drop:]...)
	for h, c := range b.last {
		if c.rev < rev {
			delete(b.last, h)
		}
	}
}

// budgetScanRevs bounds one statement of the accounting's reads, in
// revisions: a revision is read whole, so the budget never holds half of
// one.
const budgetScanRevs = 2000

// accountHistory adds the rows committed since the last pass to the
// budgets of their rules, up to the revision published now.
func (s *Store) accountHistory(ctx context.Context) error {
	if !s.budgeted {
		return nil
	}
	if s.accounted == 0 {
		// The first pass: everything above the lowest budgeted floor.
		from := int64(-1)
		for _, r := range s.rules {
			if f := r.floor().Rev; r.budget != nil && (from < 0 || f < from) {
				from = f
			}
		}
		s.accounted = max(from-1, 0)
	}
	q := s.sql.Budget.History
	head := s.Rev()
	for s.accounted < head {
		upper := min(s.accounted+budgetScanRevs, head)
		rows, err := s.rdb.QueryContext(ctx, q, s.accounted, upper)
		if err != nil {
			return fmt.Errorf("accounting history: %w", err)
		}
		for rows.Next() {
			var rev, size, version, deleted int64
			var key []byte
			if err := rows.Scan(&rev, &key, &size, &version, &deleted); err != nil {
				rows.Close()
				return fmt.Errorf("accounting history: %w", err)
			}
			r := s.ruleFor(key)
			if r.budget == nil || rev < r.floor().Rev {
				continue
			}
			r.budget.change(rev, key, size, version, deleted != 0)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("accounting history: %w", err)
		}
		s.accounted = upper
	}
	return nil
}

// budgetCheckInterval is how often the pruning loop asks whether a
// budget is exceeded.
const budgetCheckInterval = time.Second

// overBudget accounts the rows committed since the last pass, once they
// are a bucket's worth or more, and says whether a rule's history now
// outweighs its budget by a bucket or more.
func (s *Store) overBudget(ctx context.Context) bool {
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	if s.Rev()-s.accounted < budgetBucketRows {
		// Less than a bucket since the last: the floor a budget sets
		// rises by buckets, and a store written slowly or at rest is
		// sent no query for it.
		return false
	}
	if err := s.accountHistory(ctx); err != nil {
		return false // the pass at PruneInterval says why
	}
	for _, r := range s.rules {
		if r.budget != nil && r.budget.floor() > r.floor().Rev {
			return true
		}
	}
	return false
}

// warnBudget says, at start, when the live state (live, about what the
// live index holds) outweighs the default rule's history budget: the
// store serves on, the live state is never pruned, and history stays
// within the budget, but the operator probably meant something else.
func (s *Store) warnBudget(live int64) {
	if b := s.opts.RetainBytes; b > 0 && live > b {
		s.log.Warn("the live state is larger than the history budget: history is kept within the budget, the live state is never pruned",
			"live_bytes", live, "retain_bytes", b)
	}
}

// ParseSize reads a size as operators write it: bytes, or a number with
// a unit: Ki, Mi, Gi, Ti (powers of 1024, as Kubernetes writes them, also
// KiB, MiB, GiB, TiB) or K, M, G, T (powers of 1000, also KB, MB, GB,
// TB). Zero means no budget.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
	}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || n < 0 || n*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("size %q: want bytes or a number with a unit (512Mi, 2Gi, 500M)", s)
	}
	return int64(n * float64(mult)), nil
}
