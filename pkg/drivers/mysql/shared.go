package mysql

// What replicas on one database share besides the write batch: the
// migration and import locks, the servers' rows that an import checks,
// leases on the database's clock, and the wake-ups MySQL cannot send.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// migrateWait bounds the wait for another process's migration.
const migrateWait = 60

// LockMigrate serializes migrations, and refuses to open a store an import
// is writing (LockImport holds its lock): loaded mid-import, the server
// would answer from the empty store. The session that holds the import's
// lock passes, as the import migrates the store itself.
func (d *Dialect) LockMigrate(ctx context.Context, tx *sql.Tx) error {
	var got sql.NullInt64
	if err := tx.QueryRowContext(ctx, migrateLockSQL).Scan(&got); err != nil {
		return fmt.Errorf("lock %s for migration: %w", d.where(), err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("lock %s for migration: another process held the lock for %d s", d.where(), migrateWait)
	}
	var free bool
	if err := tx.QueryRowContext(ctx, importLockFreeSQL).Scan(&free); err != nil {
		return fmt.Errorf("lock %s for migration: %w", d.where(), err)
	}
	if !free {
		return fmt.Errorf("an import into %s is running: start the server once it has ended", d.where())
	}
	return nil
}

// LockImport takes the import lock for the import's transaction, and
// fails while a server's row in meta has not expired (Announce): MySQL
// has no shared lock a server could hold for as long as it runs. A server
// opening the store meanwhile is refused (LockMigrate).
func (d *Dialect) LockImport(ctx context.Context, tx *sql.Tx) error {
	var got sql.NullInt64
	if err := tx.QueryRowContext(ctx, importLockSQL).Scan(&got); err != nil {
		return fmt.Errorf("lock %s for the import: %w", d.where(), err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("another import into %s is running", d.where())
	}
	var hasMeta int
	if err := tx.QueryRowContext(ctx, hasMetaSQL).Scan(&hasMeta); err != nil {
		return fmt.Errorf("lock %s for the import: %w", d.where(), err)
	}
	if hasMeta == 0 {
		return nil
	}
	var n, left int64
	if err := tx.QueryRowContext(ctx, serverRowsLiveSQL).Scan(&n, &left); err != nil {
		return fmt.Errorf("reading the servers' rows in %s: %w", d.where(), err)
	}
	if n > 0 {
		return fmt.Errorf("a QuantyKube server is connected to %s (%d renewed their row in meta within %v): stop every replica before importing; a server that crashed lets go %d s from now",
			d.where(), n, serverExpiry, left)
	}
	return nil
}

// Notify sends nothing: MySQL has no notifications, and the other
// replicas poll (Listen).
func (d *Dialect) Notify(context.Context, mvcc.Execer, string) error { return nil }

// Listen answers at once that notifications cannot arrive: the tailer
// then reads the database every second (mvcc's tailPoll) for the other
// replicas' commits, lease changes and retention floors.
func (d *Dialect) Listen(context.Context, func(bool), func(string)) error {
	return fmt.Errorf("%w: MySQL and MariaDB have no LISTEN/NOTIFY (the other replicas' commits are read by polling; --datastore-listen-endpoint is PostgreSQL's)", mvcc.ErrNoNotifications)
}

func (d *Dialect) Leases(ctx context.Context, db *sql.DB) ([]mvcc.LeaseRow, error) {
	return generic.Leases(ctx, db, leasesSQL)
}

// RenewLease renews in one statement (autocommitted) and reads the TTL
// in the same round trip: ROW_COUNT() is the rows the UPDATE matched
// (ClientFoundRows). Nothing is notified: the other replicas read the
// lease table when they poll.
func (d *Dialect) RenewLease(ctx context.Context, db *sql.DB, id int64, _ string) (int64, bool, error) {
	rows, err := db.QueryContext(ctx, renewLeaseSQL, id, id)
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	var ttl int64
	ok := rows.Next()
	if ok {
		if err := rows.Scan(&ttl); err != nil {
			return 0, false, err
		}
	}
	return ttl, ok, rows.Err()
}

func (d *Dialect) LeaseExpired(ctx context.Context, q mvcc.Querier, id int64) (bool, error) {
	var expired bool
	err := q.QueryRowContext(ctx, leaseExpiredSQL, id).Scan(&expired)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return expired, err
}

func (d *Dialect) StartLeases(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, startLeasesSQL)
	return err
}

// A server keeps a row in meta, server/<id>, whose value is its expiry on
// the database's clock, renewed every serverRenew; LockImport refuses
// while any has not expired. One statement every serverRenew per replica,
// and one more while its revision moves (Announce).
const (
	serverRenew = 10 * time.Second
	// serverExpiry outlasts two missed renewals.
	serverExpiry = 30 * time.Second
	// serverRowsKept: an expired row (a server that crashed) is removed by
	// the next server to start once it is this old.
	serverRowsKept = time.Hour
	// serverStatementTimeout bounds each of Announce's statements, and so
	// what a stop waits for them when the database does not answer.
	serverStatementTimeout = 5 * time.Second
)

// serverRowPrefix starts the rows' names in meta; the engine reads only
// the names it knows, and leaves these alone.
const serverRowPrefix = "server/"

func newServerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Announce writes this server's row in meta and renews it every
// serverRenew until ctx ends; then it removes the row, so that an import
// need not wait for it to expire. A failed renewal is retried at the next
// tick: the row outlasts two.
//
// Beside it, every serverRenew, it records the revision the server has
// applied (applied: what its etcd API answers at) in server/<id>/rev and
// when in server/<id>/at, for status --endpoint's lag; only when that
// revision moved since the last record. These rows hold no expiry:
// LockImport and the pruning of expired rows read only server/<id>.
//
// No statement is cancelled by ctx: a cancel closes the connection, and
// MySQL carries on with a statement whose client left, so an upsert in
// flight could commit after the removal and refuse imports for
// serverExpiry. Each runs to its end, or to serverStatementTimeout, and
// the removal follows it on the same connection.
func (d *Dialect) Announce(ctx context.Context, applied func() int64) {
	name := serverRowPrefix + d.serverID
	revName, atName := name+"/rev", name+"/at"
	c, err := newConnector(d.cfg)
	if err != nil {
		return
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	defer db.Close()
	exec := func(q string, args ...any) error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serverStatementTimeout)
		defer cancel()
		_, err := db.ExecContext(sctx, q, args...)
		return err
	}
	defer func() { _ = exec(serverRowDeleteSQL, name, revName, atName) }()
	recorded := int64(-1)
	for first := true; ; {
		q := serverRowUpsertSQL
		if first {
			q = serverRowsPruneUpsertSQL
		}
		if exec(q, name) == nil {
			first = false
			if rev := applied(); rev != recorded && exec(serverAppliedUpsertSQL, revName, rev, atName) == nil {
				recorded = rev
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(serverRenew):
		}
	}
}
