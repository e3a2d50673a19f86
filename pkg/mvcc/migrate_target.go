package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
)

// migrateTarget is the store a Migrate writes.
type migrateTarget struct {
	d        Dialect
	sh       ReplicaDialect
	st       *Statements
	q        migrateSQL
	wdb, rdb *sql.DB
}

// openMigrateTarget opens the database d names, after checking it holds
// nothing but a store's tables (a wrong endpoint, or the source's other
// tables, is refused before anything is written), and brings its schema
// up to date, as an import does.
func openMigrateTarget(ctx context.Context, d Dialect, log *slog.Logger) (*migrateTarget, error) {
	st := d.Statements()
	if err := st.check(isReplica(d)); err != nil {
		return nil, err
	}
	if err := checkOwnTables(ctx, d); err != nil {
		return nil, err
	}
	wdb, rdb, err := d.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	sh, _ := d.(ReplicaDialect)
	t := &migrateTarget{d: d, sh: sh, st: st, q: newMigrateSQL(d), wdb: wdb, rdb: rdb}
	s := &Store{d: d, sql: st, wdb: wdb, rdb: rdb, log: log}
	if err := s.migrate(ctx, sh); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *migrateTarget) close() {
	t.wdb.Close()
	t.rdb.Close()
	if c, ok := t.d.(interface{ Close() error }); ok {
		c.Close()
	}
}

// begin checks that the target is empty, or holds an interrupted
// migrate's rows (which it removes), and writes the migrate_pending mark
// in the same transaction: from its commit on, no server opens the store
// until finish removes it. On a shared database LockImport refuses while
// a server is connected.
func (t *migrateTarget) begin(ctx context.Context) (restarted bool, err error) {
	tx, err := t.wdb.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if t.sh != nil {
		if err := t.sh.LockImport(ctx, tx); err != nil {
			return false, err
		}
	}
	meta, err := readMigrateMeta(ctx, tx, t.q)
	if err != nil {
		return false, err
	}
	if _, ok := meta[migratePending]; ok {
		restarted = true
		for _, table := range []string{"log", "current", "leases", "retention"} {
			if _, err := tx.ExecContext(ctx, t.q.deleteAll(table)); err != nil {
				return false, fmt.Errorf("empty the interrupted migrate's %s: %w", table, err)
			}
		}
	} else {
		var keys, rows, leases, imported int64
		if err := tx.QueryRowContext(ctx, t.st.Import.Size).Scan(&keys, &rows, &leases, &imported); err != nil {
			return false, fmt.Errorf("read the size: %w", err)
		}
		if rev := meta["rev"]; rev != 1 || keys != 0 || rows != 0 || leases != 0 || imported != 0 {
			return false, fmt.Errorf("the target is not empty (revision %d, %d keys, %d log rows, %d leases): migrate fills only a new store", rev, keys, rows, leases)
		}
		if _, err := tx.ExecContext(ctx, t.q.insertMeta(), migratePending, 1); err != nil {
			return false, fmt.Errorf("mark the migrate: %w", err)
		}
	}
	return restarted, tx.Commit()
}

// finish writes, in one transaction, the source's leases, retention's
// rules (each cursor moved to the target's id of its row) and meta, and
// removes the migrate_pending mark.
func (c *migrateCopy) finish(r *Reader, sq migrateSQL, meta map[string]int64, stats *MigrateStats) error {
	ctx, t := c.ctx, c.t
	type lease struct{ id, ttl int64 }
	var leases []lease
	rows, err := c.src.QueryContext(ctx, r.sql.Schema.Leases)
	if err != nil {
		return fmt.Errorf("read the source's leases: %w", err)
	}
	for rows.Next() {
		var l lease
		if err := rows.Scan(&l.id, &l.ttl); err != nil {
			rows.Close()
			return fmt.Errorf("read the source's leases: %w", err)
		}
		leases = append(leases, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the source's leases: %w", err)
	}
	type rule struct {
		prefix                 []byte
		floor, floorMs, cursor int64
		curRev, curSub         int64
		hasCursorRow           bool
	}
	var rules []rule
	rows, err = c.src.QueryContext(ctx, sq.readRetention())
	if err != nil {
		return fmt.Errorf("read the source's retention: %w", err)
	}
	for rows.Next() {
		var u rule
		if err := rows.Scan(&u.prefix, &u.floor, &u.floorMs, &u.cursor); err != nil {
			rows.Close()
			return fmt.Errorf("read the source's retention: %w", err)
		}
		if u.prefix == nil {
			u.prefix = []byte{}
		}
		rules = append(rules, u)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the source's retention: %w", err)
	}
	for i := range rules {
		err := c.src.QueryRowContext(ctx, sq.cursorRow(), rules[i].cursor).Scan(&rules[i].curRev, &rules[i].curSub)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read retention's cursor %d: %w", rules[i].cursor, err)
		}
		rules[i].hasCursorRow = true
	}

	tx, err := t.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, l := range leases {
		if _, err := tx.ExecContext(ctx, t.st.Lease.Insert, l.id, l.ttl); err != nil {
			return fmt.Errorf("write lease %d: %w", l.id, err)
		}
	}
	ins := t.q.insert("retention", migRetentionCols, 4, 1)
	for _, u := range rules {
		var cursor int64
		if u.hasCursorRow {
			if err := tx.QueryRowContext(ctx, t.q.cursorID(), u.curRev, u.curRev, u.curSub).Scan(&cursor); err != nil {
				return fmt.Errorf("find retention's cursor: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, ins, u.prefix, u.floor, u.floorMs, cursor); err != nil {
			return fmt.Errorf("write retention's rule %q: %w", u.prefix, err)
		}
	}
	names := make([]string, 0, len(meta))
	for name := range meta {
		if !metaNotCopied[name] && !strings.HasPrefix(name, "server/") && !strings.HasPrefix(name, alarmPrefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	set := func(name string, v int64) error {
		if _, err := tx.ExecContext(ctx, t.q.deleteMeta(), name); err != nil {
			return fmt.Errorf("write meta %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, t.q.insertMeta(), name, v); err != nil {
			return fmt.Errorf("write meta %s: %w", name, err)
		}
		return nil
	}
	for _, name := range names {
		if err := set(name, meta[name]); err != nil {
			return err
		}
	}
	if t.sh != nil && len(leases) > 0 {
		// The database stamped the leases now: the first server to open
		// the store starts their deadlines (startImportedLeases).
		if err := set(importedLeasesPending, 1); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, t.q.deleteMeta(), migratePending); err != nil {
		return fmt.Errorf("remove the migrate's mark: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit the last batch: %w", err)
	}
	stats.Leases, stats.Rules = int64(len(leases)), int64(len(rules))
	return nil
}
