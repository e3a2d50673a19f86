package mvcc

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/quantyroot/quantykube/pkg/metrics"
)

// A database behind the revisions it handed out (ADR-027). A revision
// this process acknowledged (a write's answer) or showed (a read's header,
// an event) names one state for good: kube-apiserver's watch cache and
// every informer key objects by it. The database can lose such revisions:
// a failover to an asynchronous standby that had not received the last
// commits, a restore of an older backup. Handing them out again would give
// two states one resourceVersion, silently. So wherever the store reads
// the database's revision (a batch's start, the tailer, a read's fence or
// header), a revision below the highest it has acknowledged or shown
// moves the database past that one by RevisionBump and marks everything
// below compacted, in one transaction: every watch is cancelled with the
// compact revision and clients relist, as after etcdutl's snapshot
// restore --bump-revision --mark-compacted.

// RevisionBump is how far past the highest revision known to be handed
// out a database that lost revisions is moved. Replicas share the
// database and none knows what the others handed out, only that it came
// from the same lost primary, within what that primary committed while
// the replica's tailer lagged: far fewer than a billion revisions (at
// 10,000 writes a second, a day of them). etcd's documentation suggests
// the same margin for --bump-revision. An int64 holds nine billion such
// bumps.
const RevisionBump = 1_000_000_000

// BumpRevision moves the database's revision and Compact's floor to rev
// inside tx, and sets meta's reset row to it: a watcher reading the log
// from below it is cancelled (MetaSQL.LogFloor), on every replica,
// whatever its own state. It runs d's statements (RegressSQL), as a Store
// does (bumpRevision); the caller outside one is pkg/drivers/sqlite's
// restore.
func BumpRevision(ctx context.Context, tx *sql.Tx, d Dialect, rev int64) error {
	return bumpRevision(ctx, tx, &d.Statements().Regress, rev)
}

func bumpRevision(ctx context.Context, tx *sql.Tx, q *RegressSQL, rev int64) error {
	if _, err := tx.ExecContext(ctx, q.SetRev, rev); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, q.SetReset, rev)
	return err
}

// regressedError is a batch that found the database at a revision below
// one this process acknowledged or showed: it wrote nothing.
type regressedError struct{ db, seen int64 }

func (e *regressedError) Error() string {
	return fmt.Sprintf("the database is at revision %d, behind revision %d this server acknowledged or showed", e.db, e.seen)
}

func (e *regressedError) Unwrap() error { return ErrRolledBack }

// seenRev is the highest revision this process has acknowledged or shown:
// what it published, what its writer committed (answered even when the
// publish that follows fails), and the headers of reads answered from
// SQL, which may be ahead of what the tailer has read. Each only rises.
func (s *Store) seenRev() int64 {
	return max(s.publishedRev.Load(), s.replica.ownRev.Load(), s.replica.shown.Load())
}

// followLoss brings the store to the database after a check found it
// behind what this process handed out: the tailer moves it past that
// (recoverLocked) and follows it. It runs on the store's context, not the
// caller's: a catch-up that a request's end cut short while it read the
// live index again would drop the index for good.
func (s *Store) followLoss() error { return s.replica.tail.catchUp(s.bgCtx) }

// regressTimeout bounds the bump's transaction.
const regressTimeout = 30 * time.Second

// recoverLocked (with the tailer's lock) answers a database found at
// revision db, below seen: it moves the database past seen, unless another
// replica already did, and then this replica forgets what it holds of the
// lost revisions before anything reads it again. The publisher's lock
// keeps the writer's publishes and the tailer out meanwhile; reads wait
// on the fence (replicaSnapshot) or check their header (Range).
//
// It runs on the store's context, not the caller's (a read's may end at
// any moment): an index whose reload failed is dropped for good.
func (t *tailer) recoverLocked(db, seen int64) error {
	ctx, cancel := context.WithTimeout(t.s.bgCtx, regressTimeout)
	rev, bumped, err := t.bump(ctx, seen)
	cancel()
	if err != nil {
		return fmt.Errorf("the database is at revision %d, behind revision %d: moving it past: %w", db, seen, err)
	}
	if !bumped {
		// Another replica bumped it first (or it is no longer behind): the
		// log read finds the floor and moves on, as after retention.
		return nil
	}
	metrics.RevisionRegressions.Inc()
	metrics.RevisionsLost.Add(float64(seen - db))
	t.s.log.Error("the database lost committed revisions: it is behind what this server acknowledged or showed; its revision is moved past them and marked compacted, so every watch is cancelled and clients relist",
		"database_revision", db, "acknowledged_revision", seen, "lost", seen-db, "new_revision", rev)
	// The index holds states of lost revisions: read it again before a
	// read is answered from it.
	t.s.staleIndex()
	t.s.replica.indexMoved.notify()
	t.s.reloadReplicaIndex(t.s.bgCtx)
	storeMax(&t.s.compact, rev)
	storeMax(&t.s.publishedRev, rev)
	// Watchers behind rev read the log and find the floor there.
	t.s.hub.skip(rev)
	return nil
}

// bump sets the database's revision to seen + RevisionBump in one
// transaction, holding the batches' lock, unless it is no longer behind
// seen; it reports the revision the database is at and whether it moved
// it. The notification makes the other replicas read it at once.
func (t *tailer) bump(ctx context.Context, seen int64) (rev int64, bumped bool, err error) {
	tx, err := t.s.rdb.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback()
	// The lock every batch takes first: none commits until this ends.
	if err := tx.QueryRowContext(ctx, t.s.sql.Regress.LockRev).Scan(&rev); err != nil {
		return 0, false, err
	}
	if rev >= seen {
		return rev, false, nil
	}
	rev = seen + RevisionBump
	if err := bumpRevision(ctx, tx, &t.s.sql.Regress, rev); err != nil {
		return 0, false, err
	}
	if err := t.sh.Notify(ctx, tx, t.instance+notifyRev); err != nil {
		return 0, false, err
	}
	if err := tx.Commit(); err != nil {
		return 0, false, err
	}
	return rev, true, nil
}
