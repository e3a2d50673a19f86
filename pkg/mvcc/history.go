package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

func fmtMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

// Floor is the oldest retained revision for some keys and its commit time.
type Floor struct {
	Rev    int64
	UnixMs int64
}

// HistoryFloor is the oldest revision at which key's state is still
// exactly known: 1 (the empty store) until retention has pruned anything.
func (s *Store) HistoryFloor(ctx context.Context, key []byte) (Floor, error) {
	f := s.ruleFor(key).floor()
	if f.Rev > 0 {
		return f, nil
	}
	// Nothing pruned yet: the log still starts with its first commit, whose
	// time never changes: read it once.
	if ms := s.logStartMs.Load(); ms != 0 {
		return Floor{Rev: 1, UnixMs: ms}, nil
	}
	var ms sql.NullInt64
	if err := s.readRow(ctx, s.sql.History.LogStart).Scan(&ms); err != nil {
		return Floor{}, err
	}
	if ms.Valid && ms.Int64 != 0 {
		s.logStartMs.Store(ms.Int64)
	}
	return Floor{Rev: 1, UnixMs: ms.Int64}, nil
}

func (s *Store) checkRev(ctx context.Context, key []byte, rev int64) error {
	cur := s.Rev()
	if rev > cur {
		return &OutOfRangeError{Msg: fmt.Sprintf("revision %d is a future revision: the current revision is %d", rev, cur)}
	}
	f, err := s.HistoryFloor(ctx, key)
	if err != nil {
		return err
	}
	if rev < f.Rev {
		return &OutOfRangeError{Msg: fmt.Sprintf("revision %d is older than the oldest retained revision %d (%s)", rev, f.Rev, fmtMs(f.UnixMs))}
	}
	return nil
}

// RevisionAt is the newest revision committed at or before unixMs, for
// reading key.
func (s *Store) RevisionAt(ctx context.Context, key []byte, unixMs int64) (int64, error) {
	if now := s.opts.Now().UnixMilli(); unixMs > now {
		return 0, &OutOfRangeError{Msg: fmt.Sprintf("time %s is in the future (the server's time is %s)", fmtMs(unixMs), fmtMs(now))}
	}
	f, err := s.HistoryFloor(ctx, key)
	if err != nil {
		return 0, err
	}
	if f.Rev > 1 && unixMs < f.UnixMs {
		return 0, &OutOfRangeError{Msg: fmt.Sprintf("time %s is older than the oldest retained revision %d (%s)", fmtMs(unixMs), f.Rev, fmtMs(f.UnixMs))}
	}
	var rev int64
	err = s.readRow(ctx, s.sql.History.RevAtTime, unixMs).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 1, nil // before the first write: the empty store
	}
	if err != nil {
		return 0, err
	}
	// A revision committed and not yet published is no answer (kv.go):
	// the newest published one was committed before it, so at or before
	// unixMs as well.
	return min(max(rev, f.Rev), s.Rev()), nil
}

// KeyAtTime is RevisionAt and KeyAt in one statement: the revision
// committed at or before unixMs, and key as it was then (nil if absent).
// History's Get at a time is the commonest question, and one statement
// instead of two saves a round trip of the database.
func (s *Store) KeyAtTime(ctx context.Context, key []byte, unixMs int64) (int64, *mvccpb.KeyValue, error) {
	if now := s.opts.Now().UnixMilli(); unixMs > now {
		return 0, nil, &OutOfRangeError{Msg: fmt.Sprintf("time %s is in the future (the server's time is %s)", fmtMs(unixMs), fmtMs(now))}
	}
	f, err := s.HistoryFloor(ctx, key)
	if err != nil {
		return 0, nil, err
	}
	if f.Rev > 1 && unixMs < f.UnixMs {
		return 0, nil, &OutOfRangeError{Msg: fmt.Sprintf("time %s is older than the oldest retained revision %d (%s)", fmtMs(unixMs), f.Rev, fmtMs(f.UnixMs))}
	}
	var at, mod, create, version, lease, deleted sql.NullInt64
	kv := &mvccpb.KeyValue{Key: key}
	sl := s.newSlab()
	err = s.readRow(ctx, s.sql.History.KeyAtTime, unixMs, key).
		Scan(&at, &mod, kept{&sl, &kv.Value}, &create, &version, &lease, &deleted)
	if err != nil {
		return 0, nil, err
	}
	if !at.Valid {
		return 1, nil, nil // before the first write: the empty store
	}
	// At or after the floor's commit time, the revision is at least the
	// floor's (see RevisionAt).
	rev := max(at.Int64, f.Rev)
	if pub := s.Rev(); rev > pub {
		// Committed, not yet published (kv.go): the key as it was at the
		// newest published revision, as RevisionAt answers.
		kv, err := s.keyAsOf(ctx, key, pub)
		return pub, kv, err
	}
	if !mod.Valid || deleted.Int64 != 0 {
		return rev, nil, nil
	}
	kv.ModRevision, kv.CreateRevision, kv.Version, kv.Lease = mod.Int64, create.Int64, version.Int64, lease.Int64
	if kv.Value == nil {
		kv.Value = []byte{}
	}
	return rev, kv, nil
}

// FirstRevisionFrom is the oldest revision committed at or after unixMs,
// for listing the changes in kr from that time on (filtered: by key, see
// logFloor); ok is false when nothing has been committed since.
func (s *Store) FirstRevisionFrom(ctx context.Context, kr KeyRange, unixMs int64, filtered bool) (rev int64, ok bool, err error) {
	if now := s.opts.Now().UnixMilli(); unixMs > now {
		return 0, false, &OutOfRangeError{Msg: fmt.Sprintf("time %s is in the future (the server's time is %s)", fmtMs(unixMs), fmtMs(now))}
	}
	if f := s.logFloor(kr, filtered); f.Rev > 0 && unixMs < f.UnixMs {
		return 0, false, &OutOfRangeError{Msg: fmt.Sprintf("time %s is older than the oldest retained revision %d (%s)", fmtMs(unixMs), f.Rev, fmtMs(f.UnixMs))}
	}
	err = s.readRow(ctx, s.sql.History.RevFromTime, unixMs).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && rev > s.Rev()) {
		// None, or only a batch not yet published (kv.go).
		return 0, false, nil
	}
	return rev, err == nil, err
}

// RevisionBefore is the newest revision committed before unixMs, for
// listing the changes in kr up to that time (exclusive; filtered: by key,
// see logFloor). A time in the
// future is now: the current revision. A time at or before the floor's
// commit leaves nothing retained to list, and is out of range.
func (s *Store) RevisionBefore(ctx context.Context, kr KeyRange, unixMs int64, filtered bool) (int64, error) {
	cur := s.Rev()
	if now := s.opts.Now().UnixMilli(); unixMs > now {
		return cur, nil
	}
	if f := s.logFloor(kr, filtered); f.Rev > 0 && unixMs <= f.UnixMs {
		return 0, &OutOfRangeError{Msg: fmt.Sprintf("end time %s is not after the oldest retained revision %d (%s)", fmtMs(unixMs), f.Rev, fmtMs(f.UnixMs))}
	}
	var rev int64
	err := s.readRow(ctx, s.sql.History.RevBeforeTime, unixMs).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return min(rev, cur), nil
}

// KeyAt is key as it was at rev; nil if it did not exist then.
func (s *Store) KeyAt(ctx context.Context, key []byte, rev int64) (*mvccpb.KeyValue, error) {
	if err := s.checkRev(ctx, key, rev); err != nil {
		return nil, err
	}
	return s.keyAsOf(ctx, key, rev)
}

// keyAsOf is key's newest log row at or before rev (nil: none, or a
// delete), whatever the floors say.
func (s *Store) keyAsOf(ctx context.Context, key []byte, rev int64) (*mvccpb.KeyValue, error) {
	kv := &mvccpb.KeyValue{Key: key}
	var deleted int64
	sl := s.newSlab()
	err := s.readRow(ctx, s.sql.History.KeyAsOf, key, rev).
		Scan(&kv.ModRevision, kept{&sl, &kv.Value}, &kv.CreateRevision, &kv.Version, &kv.Lease, &deleted)
	if err == nil && deleted != 0 {
		return nil, nil // deleted then
	}
	return rowKV(kv, err)
}
