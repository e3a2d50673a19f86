package mvcc

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// MinRetain is the least history a retention rule may keep: kube-apiserver's
// watch cache needs 75 s of it.
const MinRetain = 75 * time.Second

// RetentionRule keeps the changes to keys under Prefix for Retain, and
// at most MaxBytes of them (0: as many as Options.RetainBytes, the
// default rule's budget; budget.go).
type RetentionRule struct {
	Prefix   []byte
	Retain   time.Duration
	MaxBytes int64
}

// lockedFloor is a rule's floor: retention raises it while History's
// reads load it. A Floor is two words, which no atomic holds together, so
// a mutex guards it.
type lockedFloor struct {
	mu sync.Mutex
	f  Floor
}

func (a *lockedFloor) load() Floor {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f
}

func (a *lockedFloor) raise(f Floor) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f.Rev > a.f.Rev {
		a.f = f
	}
}

// RetainFloor is the highest retention floor of any rule: below it some
// state is no longer exactly known.
func (s *Store) RetainFloor() int64 { return s.retainFloor.Load() }

// Floor is the floor the etcd API shows: the higher of Compact's floor and
// the retention floor (KV).
func (s *Store) Floor() int64 { return max(s.compact.Load(), s.retainFloor.Load()) }

func (s *Store) initRules(ctx context.Context) error {
	s.rules = []*retentionRule{{retain: s.opts.Retain, budget: newBudget(s.opts.RetainBytes)}}
	for _, r := range s.opts.RetainPrefixes {
		if len(r.Prefix) == 0 {
			return errors.New("retention: a prefix rule needs a non-empty prefix")
		}
		if r.MaxBytes < 0 || s.opts.RetainBytes < 0 {
			return fmt.Errorf("retention of %q: a byte budget must be 0 (none) or positive", r.Prefix)
		}
		if r.MaxBytes > 0 && s.opts.RetainBytes > 0 && r.MaxBytes > s.opts.RetainBytes {
			return fmt.Errorf("retention of %q keeps up to %d bytes, more than the %d of every other key: a prefix's budget must not exceed the default rule's", r.Prefix, r.MaxBytes, s.opts.RetainBytes)
		}
		maxBytes := r.MaxBytes
		if maxBytes == 0 {
			maxBytes = s.opts.RetainBytes
		}
		s.rules = append(s.rules, &retentionRule{prefix: r.Prefix, retain: r.Retain, budget: newBudget(maxBytes)})
	}
	for _, r := range s.rules {
		s.budgeted = s.budgeted || r.budget != nil
		if r.retain != 0 && r.retain < MinRetain {
			return fmt.Errorf("retention of %q is %v: it must be 0 (keep everything) or at least %v", r.prefix, r.retain, MinRetain)
		}
		var f Floor
		err := s.wdb.QueryRowContext(ctx, s.sql.Retention.Floor, ruleKey(r)).Scan(&f.Rev, &f.UnixMs)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		r.fl.raise(f)
	}
	// An imported store holds nothing before the import's revision, for
	// any key (import.go).
	var rev, ms sql.NullInt64
	err := s.wdb.QueryRowContext(ctx, s.sql.Retention.Imported).Scan(&rev, &ms)
	if err != nil {
		return err
	}
	for _, r := range s.rules {
		r.fl.raise(Floor{Rev: rev.Int64, UnixMs: ms.Int64})
	}
	var rf int64
	if err := s.wdb.QueryRowContext(ctx, s.sql.Retention.RetainFloor).Scan(&rf); err != nil {
		return err
	}
	s.retainFloor.Store(rf)
	return nil
}

// syncFloors raises the in-memory floors to the ones in the database. On a
// shared database another replica may have pruned: without this, History
// here would keep answering for revisions whose rows are gone, until this
// replica pruned too. The tailer calls it when the pruning replica's
// notification arrives (pruneBatch). Floors only rise, so a stale read is
// harmless.
func (s *Store) syncFloors(ctx context.Context) error {
	rows, err := s.rdb.QueryContext(ctx, s.sql.Retention.Floors)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var prefix []byte
		var f Floor
		if err := rows.Scan(&prefix, &f.Rev, &f.UnixMs); err != nil {
			return err
		}
		for _, r := range s.rules {
			if bytes.Equal(ruleKey(r), prefix) {
				r.fl.raise(f)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var rf int64
	if err := s.rdb.QueryRowContext(ctx, s.sql.Retention.RetainFloor).Scan(&rf); err != nil {
		return err
	}
	storeMax(&s.retainFloor, rf)
	return nil
}

// ruleKey names a rule in the retention table; the default rule is the
// empty prefix.
func ruleKey(r *retentionRule) []byte {
	if r.prefix == nil {
		return []byte{}
	}
	return r.prefix
}

// pruneLoop prunes every PruneInterval and, with a byte budget, as soon
// as the history outweighs it (checked every budgetCheckInterval): the
// log then exceeds the budget by what is written in a second, not in a
// PruneInterval (at 5 MB/s, 5 MB against 150 MB). The check reads only
// the rows committed since the last, as the pass that follows would.
func (s *Store) pruneLoop() {
	tick := s.opts.PruneInterval
	if s.budgeted {
		tick = min(tick, budgetCheckInterval)
	}
	// The first pass by time comes a PruneInterval after start, as the
	// ones after it: a store at rest sends its database nothing before.
	last := s.opts.Now()
	s.every(tick, func(ctx context.Context) {
		if now := s.opts.Now(); now.Sub(last) >= s.opts.PruneInterval-tick/2 || s.overBudget(ctx) {
			last = now
		} else {
			return
		}
		if n, err := s.Prune(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("retention pruning failed; will retry", "err", err)
		} else if n > 0 {
			s.log.Debug("retention pruned", "rows", n, "floor", s.RetainFloor())
		}
	})
}

// Prune removes, for every rule, the log rows nobody can ask for any more:
// rows superseded by a change older than the rule's floor F (the newest
// revision committed before now minus its retention), and deletes older
// than F. State at every revision >= F, and every change after F with its
// prev_kv, stays exact. It works in small transactions on the writer's
// connection, between the writer's batches (not inside them), and returns
// the number of rows removed.
func (s *Store) Prune(ctx context.Context) (int, error) {
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	if err := s.accountHistory(ctx); err != nil {
		return 0, err
	}
	total := 0
	for _, r := range s.rules {
		n, err := s.pruneRule(ctx, r)
		r.report(s.opts.Now())
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// target is the floor r's retention asks for now: the newest revision
// committed before now minus its retention, or, where its byte budget
// asks for more, the lowest revision above which its changes fit the
// budget; ok is false when neither asks for any. Options.Hold caps it.
func (s *Store) target(ctx context.Context, r *retentionRule) (f Floor, ok bool, err error) {
	if r.retain != 0 {
		cutoff := s.opts.Now().Add(-r.retain).UnixMilli()
		err := s.rdb.QueryRowContext(ctx, s.sql.Retention.AtTime, cutoff).Scan(&f.Rev, &f.UnixMs)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return f, false, err
		}
		ok = err == nil
	}
	if r.budget != nil {
		if rev := r.budget.floor(); rev > f.Rev {
			err := s.rdb.QueryRowContext(ctx, s.sql.Retention.AtRev, rev).Scan(&f.Rev, &f.UnixMs)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return f, false, err
			}
			ok = ok || err == nil
		}
	}
	if ok && s.opts.Hold != nil {
		if h := s.opts.Hold(); h > 0 && f.Rev > h {
			var at Floor
			err := s.rdb.QueryRowContext(ctx, s.sql.Retention.AtRev, h).Scan(&at.Rev, &at.UnixMs)
			if err != nil {
				// No row at or after the hold: nothing it needs is here.
				return f, ok, ignoreNoRows(err)
			}
			f = Floor{Rev: h, UnixMs: at.UnixMs}
		}
	}
	return f, ok, nil
}

// ignoreNoRows is err, or nil for sql.ErrNoRows.
func ignoreNoRows(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

func (s *Store) pruneRule(ctx context.Context, r *retentionRule) (int, error) {
	f, ok, err := s.target(ctx, r)
	if err != nil || !ok {
		return 0, err
	}
	defer func() {
		if r.budget != nil {
			r.budget.below(r.floor().Rev)
		}
	}()
	if old := r.floor(); f.Rev <= old.Rev {
		f = old
	}
	// Rows strictly below F are candidates; the rows at F stay, so every
	// event at F and after is still whole.
	var maxID int64
	err = s.rdb.QueryRowContext(ctx, s.sql.Retention.LastBelow, f.Rev).Scan(&maxID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// Raise the floors in memory before any row goes: a watcher that reads
	// the log and then finds its revision below the floor knows its read
	// may have missed rows.
	r.fl.raise(f)
	if f.Rev > s.retainFloor.Load() {
		s.retainFloor.Store(f.Rev)
	}
	removed := 0
	for {
		start := time.Now()
		n, done, err := s.pruneBatch(ctx, r, f, maxID)
		removed += n
		if err != nil || done {
			return removed, err
		}
		// Each batch holds the writer's one connection (and on SQLite the
		// database's write lock), which the writer needs for every commit:
		// rest three times as long as the batch took, so pruning a backlog
		// takes at most a quarter of the writer's time.
		select {
		case <-ctx.Done():
			return removed, ctx.Err()
		case <-time.After(3 * time.Since(start)):
		}
	}
}

func (s *Store) pruneBatch(ctx context.Context, r *retentionRule, f Floor, maxID int64) (int, bool, error) {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback()
	var cursor, was int64
	err = tx.QueryRowContext(ctx, s.sql.Retention.Cursor, ruleKey(r)).Scan(&cursor, &was)
	if errors.Is(err, sql.ErrNoRows) {
		if _, err := tx.ExecContext(ctx, s.sql.Retention.InsertRule, ruleKey(r)); err != nil {
			return 0, false, err
		}
	} else if err != nil {
		return 0, false, err
	}
	rows, err := tx.QueryContext(ctx, s.sql.Retention.Rows, cursor, maxID, s.opts.PruneBatch)
	if err != nil {
		return 0, false, err
	}
	type cand struct {
		id, rev, deleted int64
		key              []byte
	}
	var cands []cand
	for rows.Next() {
		var c cand
		if err := rows.Scan(&c.id, &c.key, &c.rev, &c.deleted); err != nil {
			rows.Close()
			return 0, false, err
		}
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	removed := 0
	for _, c := range cands {
		cursor = c.id
		if s.ruleFor(c.key) != r {
			continue
		}
		// Everything this change superseded; a delete goes with the rows
		// before it, never after them, or the key would come back.
		// A live key's latest change is never deleted: it is the row its
		// value is read from (current holds none, ADR-014), and nothing
		// supersedes it. Keep it so (TestPruneKeepsEveryLiveValue).
		res, err := tx.ExecContext(ctx, s.sql.Retention.DeleteBelow, c.key, c.rev)
		if err != nil {
			return 0, false, err
		}
		n, _ := res.RowsAffected()
		removed += int(n)
		if c.deleted != 0 {
			if _, err := tx.ExecContext(ctx, s.sql.Retention.DeleteRow, c.id); err != nil {
				return 0, false, err
			}
			removed++
		}
	}
	if _, err := tx.ExecContext(ctx, s.sql.Retention.SetRule, f.Rev, f.UnixMs, cursor, ruleKey(r)); err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, s.sql.Retention.SetFloor, f.Rev, f.Rev); err != nil {
		return 0, false, err
	}
	if r := s.replica; r != nil && f.Rev > was {
		// The other replicas' floors follow this notification only
		// (tail.go); it is sent at commit.
		if err := r.tail.sh.Notify(ctx, tx, r.tail.instance+notifyFloor); err != nil {
			return 0, false, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, false, err
	}
	metrics.PrunedRows.Add(float64(removed))
	return removed, len(cands) < s.opts.PruneBatch, nil
}

// retentionRule keeps changes to keys under prefix for retain, and at
// most what its budget allows.
type retentionRule struct {
	prefix []byte // nil: the default rule, every key no other rule takes
	retain time.Duration
	budget *budget // nil: no byte budget
	fl     lockedFloor
}

// report sets the rule's metrics: how far back its history reaches, and
// what its budget counts.
func (r *retentionRule) report(now time.Time) {
	name := "default"
	if r.prefix != nil {
		name = string(r.prefix)
	}
	if f := r.floor(); f.UnixMs > 0 {
		metrics.HistoryWindow.WithLabelValues(name).Set(now.Sub(time.UnixMilli(f.UnixMs)).Seconds())
	}
	if r.budget != nil {
		metrics.HistoryBytes.WithLabelValues(name).Set(float64(r.budget.total))
	}
}

func (r *retentionRule) floor() Floor { return r.fl.load() }

func (r *retentionRule) matches(key []byte) bool {
	return r.prefix == nil || bytes.HasPrefix(key, r.prefix)
}

func (r *retentionRule) overlaps(kr KeyRange) bool {
	if r.prefix == nil {
		return true
	}
	return kr.Overlaps(PrefixRange(r.prefix))
}

// ruleFor is the rule governing key: the longest matching prefix, else the
// default.
func (s *Store) ruleFor(key []byte) *retentionRule {
	best := s.rules[0]
	for _, r := range s.rules[1:] {
		if r.matches(key) && (best.prefix == nil || len(r.prefix) > len(best.prefix)) {
			best = r
		}
	}
	return best
}

// logFloor is the floor a read of kr's history must start at or above:
// the highest floor of the rules kr touches, so that every key's history
// is exact from there; or, for a read filtered by key (LogQuery.Keep),
// the lowest, each row then checked against its own key's rule as it is
// read (scanHeads), so that a rule of short retention (leases, 10 minutes)
// refuses only a read that would list its keys.
func (s *Store) logFloor(kr KeyRange, filtered bool) Floor {
	if !filtered {
		return s.rangeFloor(kr)
	}
	var floor Floor
	first := true
	for _, r := range s.rules {
		if r.overlaps(kr) {
			if f := r.floor(); first || f.Rev < floor.Rev {
				floor, first = f, false
			}
		}
	}
	return floor
}

// rangeFloor is the highest floor among the rules whose keys kr touches.
func (s *Store) rangeFloor(kr KeyRange) Floor {
	var floor Floor
	for _, r := range s.rules {
		if r.overlaps(kr) {
			if f := r.floor(); f.Rev > floor.Rev {
				floor = f
			}
		}
	}
	return floor
}
