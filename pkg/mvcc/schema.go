package mvcc

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
)

func randomID() int64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}

// migrate brings the schema to the newest version this binary knows, in
// one transaction (under sh's lock, when replicas may start at once).
func (s *Store) migrate(ctx context.Context, sh ReplicaDialect) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if sh != nil {
		if err := sh.LockMigrate(ctx, tx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.sql.Schema.CreateMeta); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int64
	err = tx.QueryRowContext(ctx, s.sql.Schema.Version).Scan(&have)
	if errors.Is(err, sql.ErrNoRows) {
		have = 0
	} else if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	steps := s.d.Migrations()
	if have > int64(len(steps)) {
		return fmt.Errorf("database schema version %d is newer than this quantykube understands (%d): refusing to start", have, len(steps))
	}
	if have == int64(len(steps)) {
		return nil
	}
	for v := have; v < int64(len(steps)); v++ {
		if check := migrationChecks[v+1]; check != nil {
			if err := check(ctx, tx, &s.sql.Schema); err != nil {
				return fmt.Errorf("migrate to schema %d: %w", v+1, err)
			}
		}
		for _, stmt := range steps[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate to schema %d: %w", v+1, err)
			}
		}
		s.log.Info("migrated schema", "dialect", s.d.Name(), "version", v+1)
	}
	if have == 0 {
		// An empty store is at revision 1, as etcd's is.
		for name, value := range map[string]int64{"rev": 1, "compact": 0, "member_id": randomID(), "cluster_id": randomID(), "last_unix_ms": 0} {
			if _, err := tx.ExecContext(ctx, s.sql.Schema.InsertMeta, name, value); err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.sql.Schema.InsertVersion, int64(len(steps))); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	} else if _, err := tx.ExecContext(ctx, s.sql.Schema.SetVersion, int64(len(steps))); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return tx.Commit()
}

// migrationChecks run before the step to a schema version, inside the
// migration's transaction: an error refuses the migration and leaves the
// store as it was, at the version before.
var migrationChecks = map[int64]func(context.Context, *sql.Tx, *SchemaSQL) error{
	3: everyLiveKeyHasItsLogRow,
}

// everyLiveKeyHasItsLogRow guards schema 3, which drops current's copy of
// each value and reads it from the log row (key, mod_rev) instead. No
// binary ever wrote a current row without that row (a put writes both in
// its batch, an import both, and retention keeps each key's latest
// change), but a store that lacks it would lose the value: refuse, and
// name it, rather than drop it.
func everyLiveKeyHasItsLogRow(ctx context.Context, tx *sql.Tx, q *SchemaSQL) error {
	var first []byte
	err := tx.QueryRowContext(ctx, q.FirstWithoutValue).Scan(&first)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	var n int64
	if err == nil {
		err = tx.QueryRowContext(ctx, q.CountWithoutValue).Scan(&n)
	}
	if err != nil {
		return fmt.Errorf("check every live key's log row: %w", err)
	}
	return fmt.Errorf("%d live keys have no log row at their mod revision (first %q): this schema reads a live key's value from that row, and dropping current's value column would lose theirs: refusing to migrate", n, first)
}

type persisted struct {
	rev, compact, member, cluster, lastUnixMs int64
	leases                                    map[int64]int64
}

func (s *Store) loadState(ctx context.Context) (persisted, error) {
	st := persisted{leases: map[int64]int64{}}
	rows, err := s.wdb.QueryContext(ctx, s.sql.Schema.State)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			rows.Close()
			return st, err
		}
		switch name {
		case "rev":
			st.rev = v
		case "compact":
			st.compact = v
		case "member_id":
			st.member = v
		case "cluster_id":
			st.cluster = v
		case "last_unix_ms":
			st.lastUnixMs = v
		case migratePending:
			rows.Close()
			return st, ErrMigratePending
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	rows, err = s.wdb.QueryContext(ctx, s.sql.Schema.Leases)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, ttl int64
		if err := rows.Scan(&id, &ttl); err != nil {
			return st, err
		}
		st.leases[id] = ttl
	}
	return st, rows.Err()
}
