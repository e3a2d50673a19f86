package mvcc

import (
	"context"
	"fmt"
	"time"
)

// The checks behind the health endpoints (pkg/endpoint): each answers nil
// or what is wrong, within ctx.

// CheckDatabase reads the store's revision through the reader pool: the
// database answers a query.
func (s *Store) CheckDatabase(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	var rev int64
	if err := s.rdb.QueryRowContext(ctx, s.sql.Meta.Rev).Scan(&rev); err != nil {
		return fmt.Errorf("read the revision: %w", err)
	}
	return nil
}

// CheckWriter waits until the writer goroutine takes a no-op request off
// its queue and answers it after the batch it came in: the writer runs and
// is not stuck in a commit.
func (s *Store) CheckWriter(ctx context.Context) error {
	return s.submit(ctx, &writeReq{kind: wPing}).err
}

// CheckWriterAlive answers at once, from the writer's heartbeat: the
// writer goroutine is waiting on the database, or has made progress (taken
// or finished a batch, or waited idle) within writerStall. How long the
// database takes to answer is CheckWriter's and CheckDatabase's concern
// (readiness): restarting this process would not make it answer sooner.
func (s *Store) CheckWriterAlive(context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	w := s.writer
	if w.inDB.Load() {
		return nil
	}
	if idle := time.Since(w.born) - time.Duration(w.beat.Load()); idle > writerStall {
		return fmt.Errorf("the writer has made no progress for %s, and is not waiting on the database", idle.Round(time.Second))
	}
	return nil
}

// CheckSchema reads the schema version in the database: a newer one means
// another quantykube (a replica, on PostgreSQL) has migrated it past what
// this binary knows, and this one must not serve it.
func (s *Store) CheckSchema(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	var have int64
	if err := s.rdb.QueryRowContext(ctx, s.sql.Schema.Version).Scan(&have); err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if want := int64(len(s.d.Migrations())); have != want {
		return fmt.Errorf("the database's schema version is %d, this quantykube's is %d: run the quantykube that migrated it", have, want)
	}
	return nil
}
