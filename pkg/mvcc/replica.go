package mvcc

import (
	"context"
	"fmt"
	"sync/atomic"
)

// replicaState is what a store keeps only where replicas share the
// database (a ReplicaDialect: PostgreSQL, MySQL). Store.replica is nil on
// SQLite, and every branch between the two paths tests it.
type replicaState struct {
	// tail publishes every replica's batches, this one's included
	// (tail.go).
	tail *tailer
	// indexMoved is notified when the live index changes, and fence reads
	// the database's revision, for the reads that wait for the index to
	// reach it (index_replica.go); fence is nil without an index.
	indexMoved notifier
	fence      *readFence
	// ownRev is the newest revision a batch of this replica's writer took;
	// the writer publishes it itself.
	ownRev atomic.Int64
	// shown is the highest header revision a Range answered, where a read
	// from SQL may be ahead of what the tailer published; with the
	// published revision and ownRev it is the revision the database must
	// never fall behind (regress.go).
	shown atomic.Int64
}

// openReplica readies a store whose database replicas share: the
// database, not memory, is the authority on revisions, floors and
// leases; batches come from replicaBatcher and the tailer publishes them.
func (s *Store) openReplica(ctx context.Context, sh ReplicaDialect, w *writer) error {
	r := &replicaState{tail: newTailer(s, sh)}
	s.replica = r
	s.leases.renewReplica = r.tail.renew
	if err := s.startImportedLeases(ctx, sh); err != nil {
		return fmt.Errorf("start the imported leases: %w", err)
	}
	if err := r.tail.syncLeases(ctx); err != nil {
		return err
	}
	if !s.opts.DisableLiveIndex {
		// Before the tailer starts: the index is then at or past the
		// Hub's revision, and the tailer skips the changes it holds.
		if err := s.openReplicaIndex(ctx); err != nil {
			return err
		}
	}
	r.tail.start()
	w.b = &replicaBatcher{s: s, sh: sh, notify: r.tail.instance, mark: writerMark(sh)}
	w.pub, w.timeout = r.tail, replicaBatchTimeout
	return nil
}

// openReplicaIndex loads the live index and sets up the read fence its
// reads wait on.
func (s *Store) openReplicaIndex(ctx context.Context) error {
	c, err := s.loadReplicaIndex(ctx, s.indexBudget())
	if err != nil {
		return fmt.Errorf("load the live index: %w", err)
	}
	if c == nil {
		s.log.Warn("the live keys exceed the live index budget: reads go to the database", "live_index_bytes", s.opts.LiveIndexBytes)
		return nil
	}
	s.replica.fence = &readFence{base: s.bgCtx, query: func(ctx context.Context) (rev int64, err error) {
		err = s.readRow(ctx, s.sql.Meta.Rev).Scan(&rev)
		return rev, err
	}}
	s.index.Store(c)
	c.logLoaded(s.log, s.opts.LiveIndexBytes)
	s.warnBudget(c.bytes())
	return nil
}

// indexChanged wakes the reads waiting for the live index to move, where
// replicas share the database (index_replica.go); on SQLite none wait.
func (s *Store) indexChanged() {
	if s.replica != nil {
		s.replica.indexMoved.notify()
	}
}
