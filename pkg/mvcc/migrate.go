package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Migrate copies the store in from's database to the empty store in to's,
// whatever their dialects: every log row as it is (rev, sub, key, value,
// create_rev, version, lease, deleted, unix_ms), the live keys, the
// leases, retention's rules with their floors and meta's revision, floors
// and marks, so the target answers reads, watches and History at the same
// revisions as the source (ADR-050).
//
// The source is read in one read transaction: a consistent snapshot at
// one revision, taken beside a server that may still write (what it
// writes after the snapshot is not copied). The target is written in
// batches, each its own transaction, under meta's migrate_pending mark,
// written first and removed last with the last batch: a store holding it
// refuses to open (ErrMigratePending), and a Migrate onto it starts over.
type MigrateOptions struct {
	// Progress receives a line per table and about one a second while
	// rows are copied; nil is silent.
	Progress io.Writer
	// BatchRows bounds the rows of one target transaction (0: 1000).
	BatchRows int
	Logger    *slog.Logger
	// AfterBatch, when not nil, runs after each batch the target
	// committed, with their count so far (tests interrupt a migrate here).
	AfterBatch func(batches int)
}

// MigrateStats is what a Migrate copied.
type MigrateStats struct {
	Rev       int64 // the revision of the snapshot copied
	LogRows   int64
	Keys      int64
	Leases    int64
	Rules     int64 // retention's rows
	Restarted bool  // the target held an interrupted migrate, emptied first
}

// migratePending is meta's mark of a migrate not finished on its target.
const migratePending = "migrate_pending"

// ErrMigratePending is the answer to opening a store an interrupted
// migrate left half written.
var ErrMigratePending = errors.New("this store is the target of a quantykube migrate that did not finish: it holds part of its source only and is not served; run the same quantykube migrate again to complete it (it starts over)")

// metaNotCopied are meta's rows the target keeps its own of: its schema
// version, its member (a new member of the source's cluster), the
// replication lineage (the target is a new store for a bucket: ADR-044
// refuses mixing it with the source's objects), the writer mark of the
// target's own replicas, and the marks Migrate writes itself; nor are the
// rows server/<id> (and server/<id>/rev, /at) the source's servers
// announce themselves and their applied revisions in, nor the alarms
// (alarmPrefix: a NOSPACE alarm is the source's database past its quota,
// ADR-049), each raised by a member the target has not.
var metaNotCopied = map[string]bool{
	"schema": true, "member_id": true, "lineage": true, "last_writer": true,
	migratePending: true, importedLeasesPending: true,
}

// migrateMaxBatchBytes bounds the keys and values of one batch, under
// MySQL's max_allowed_packet and PostgreSQL's message size.
const migrateMaxBatchBytes = 8 << 20

func Migrate(ctx context.Context, from, to Dialect, opts MigrateOptions) (MigrateStats, error) {
	var stats MigrateStats
	if opts.BatchRows <= 0 {
		opts.BatchRows = 1000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	r, err := OpenReader(ctx, from)
	if err != nil {
		return stats, fmt.Errorf("migrate: the source: %w", err)
	}
	defer r.Close()
	src, err := r.db.BeginTx(ctx, readTxOptions)
	if err != nil {
		return stats, fmt.Errorf("migrate: the source: begin a read transaction: %w", err)
	}
	defer src.Rollback()
	sq := newMigrateSQL(from)
	meta, err := readMigrateMeta(ctx, src, sq)
	if err != nil {
		return stats, fmt.Errorf("migrate: the source: %w", err)
	}
	if _, ok := meta[migratePending]; ok {
		return stats, fmt.Errorf("migrate: the source: %w", ErrMigratePending)
	}
	stats.Rev = meta["rev"]
	var logRows, keys int64
	if err := src.QueryRowContext(ctx, sq.count("log")).Scan(&logRows); err != nil {
		return stats, fmt.Errorf("migrate: the source: count the log: %w", err)
	}
	if err := src.QueryRowContext(ctx, sq.count("current")).Scan(&keys); err != nil {
		return stats, fmt.Errorf("migrate: the source: count the keys: %w", err)
	}
	fmt.Fprintf(opts.Progress, "migrate: source at revision %d: %d log rows, %d live keys\n", stats.Rev, logRows, keys)

	t, err := openMigrateTarget(ctx, to, opts.Logger)
	if err != nil {
		return stats, fmt.Errorf("migrate: the target: %w", err)
	}
	defer t.close()
	if stats.Restarted, err = t.begin(ctx); err != nil {
		return stats, fmt.Errorf("migrate: the target: %w", err)
	}
	if stats.Restarted {
		fmt.Fprintf(opts.Progress, "migrate: the target held an interrupted migrate: emptied it, starting over\n")
	}
	c := &migrateCopy{ctx: ctx, src: src, t: t, opts: opts}
	if stats.LogRows, err = c.table("log", sq.readLog(), migLogCols, migLogBytes, logRows); err != nil {
		return stats, fmt.Errorf("migrate: %w", err)
	}
	if stats.Keys, err = c.table("current", sq.readCurrent(), migCurrentCols, migCurrentBytes, keys); err != nil {
		return stats, fmt.Errorf("migrate: %w", err)
	}
	if err := c.finish(r, sq, meta, &stats); err != nil {
		return stats, fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(opts.Progress, "migrate: done: revision %d, %d log rows, %d live keys, %d leases, %d retention rules\n", stats.Rev, stats.LogRows, stats.Keys, stats.Leases, stats.Rules)
	return stats, nil
}

func readMigrateMeta(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, m migrateSQL) (map[string]int64, error) {
	rows, err := q.QueryContext(ctx, m.readMeta())
	if err != nil {
		return nil, fmt.Errorf("read meta: %w", err)
	}
	defer rows.Close()
	meta := map[string]int64{}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, fmt.Errorf("read meta: %w", err)
		}
		meta[name] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read meta: %w", err)
	}
	return meta, nil
}

// migrateCopy is one migrate's copy of the rows.
type migrateCopy struct {
	ctx     context.Context
	src     *sql.Tx
	t       *migrateTarget
	opts    MigrateOptions
	batches int
}

// table copies the rows query reads from the source into table's cols on
// the target, in batches; isBytes says which columns hold bytes (the
// others are integers). A NULL stays NULL (a delete's value) and an empty
// value stays empty.
func (c *migrateCopy) table(table, query, cols string, isBytes []bool, total int64) (int64, error) {
	ncols := len(isBytes)
	rows, err := c.src.QueryContext(c.ctx, query)
	if err != nil {
		return 0, fmt.Errorf("read the source's %s: %w", table, err)
	}
	defer rows.Close()
	var done int64
	args := make([]any, 0, c.opts.BatchRows*ncols)
	n, size := 0, 0
	last := time.Now()
	flush := func() error {
		if n == 0 {
			return nil
		}
		if _, err := c.t.wdb.ExecContext(c.ctx, c.t.q.insert(table, cols, ncols, n), args...); err != nil {
			return fmt.Errorf("write %d rows of %s: %w", n, table, err)
		}
		done += int64(n)
		args, n, size = args[:0], 0, 0
		c.batches++
		if c.batches == 1 || time.Since(last) >= time.Second {
			fmt.Fprintf(c.opts.Progress, "migrate: %s: %d/%d rows\n", table, done, total)
			last = time.Now()
		}
		if c.opts.AfterBatch != nil {
			c.opts.AfterBatch(c.batches)
		}
		return nil
	}
	dest := make([]any, ncols)
	vals := make([]sql.Null[[]byte], ncols)
	ints := make([]int64, ncols)
	for i := range dest {
		if isBytes[i] {
			dest[i] = &vals[i]
		} else {
			dest[i] = &ints[i]
		}
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return done, fmt.Errorf("read the source's %s: %w", table, err)
		}
		for i := range dest {
			if !isBytes[i] {
				args = append(args, ints[i])
				continue
			}
			if !vals[i].Valid {
				args = append(args, nil)
				continue
			}
			b := vals[i].V
			if b == nil {
				b = []byte{}
			}
			size += len(b)
			args = append(args, b)
		}
		n++
		if n >= c.opts.BatchRows || size >= migrateMaxBatchBytes {
			if err := flush(); err != nil {
				return done, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return done, fmt.Errorf("read the source's %s: %w", table, err)
	}
	if err := flush(); err != nil {
		return done, err
	}
	fmt.Fprintf(c.opts.Progress, "migrate: %s: %d rows copied\n", table, done)
	return done, nil
}
