package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"
)

// A server whose LISTEN connection holds the serve lock is seen by an
// import through the lock. One behind a transaction pooler without a
// listen endpoint holds no session that could keep it (ADR-026), so it
// keeps a row in meta instead, server/<id> with an expiry on the
// database's clock, renewed while no proven session holds the lock;
// LockImport refuses while any such row has not expired. It costs one
// statement every serverRenew, and only while the lock is not held, plus
// one every serverRenew while the server's revision moves (Announce): a
// replica at rest with a working LISTEN connection sends nothing
// (ADR-007).
const (
	serverRenew = 10 * time.Second
	// serverExpiry outlasts two missed renewals.
	serverExpiry = 30 * time.Second
	// serverRowsKept: an expired row (a server that crashed) is removed
	// by the next server to start once it is this old.
	serverRowsKept = time.Hour
)

// serverRowPrefix starts the rows' names in meta; loadState reads only
// the names it knows, and leaves these alone.
const serverRowPrefix = "server/"

func newServerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Announce writes this server's row in meta and renews it every
// serverRenew while the serve lock is not held, until ctx ends; then it
// removes the row, so that an import need not wait for it to expire. A
// failed renewal is retried at the next tick: the row outlasts two.
//
// Beside it, every serverRenew, it records the revision the server has
// applied (applied: what its etcd API answers at) in server/<id>/rev and
// when in server/<id>/at, for status --endpoint's lag; only when that
// revision moved since the last record, so that a replica at rest still
// sends nothing (ADR-007). These rows hold no expiry: LockImport and the
// pruning of expired rows read only server/<id>.
func (d *Dialect) Announce(ctx context.Context, applied func() int64) {
	name := serverRowPrefix + d.serverID
	revName, atName := name+"/rev", name+"/at"
	var conn *pgx.Conn
	defer func() {
		if conn == nil {
			return
		}
		_ = statement(ctx, conn, serverRowDeleteSQL, name, revName, atName)
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	first := true
	recorded := int64(-1)
	for {
		var err error
		if first || !d.serveLockHeld.Load() {
			if conn, err = d.renewServerRow(ctx, conn, name, first); err == nil {
				first = false
			}
		}
		if rev := applied(); err == nil && rev != recorded {
			if conn, err = d.serverStatement(ctx, conn, serverAppliedUpsertSQL, revName, rev, atName); err == nil {
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

// renewServerRow upserts the row on conn (connecting when conn is nil or
// broken) and returns the connection to use next time. The first write
// also removes rows of servers gone for serverRowsKept.
func (d *Dialect) renewServerRow(ctx context.Context, conn *pgx.Conn, name string, first bool) (*pgx.Conn, error) {
	q := serverRowUpsertSQL
	if first {
		q = serverRowsPruneUpsertSQL
	}
	return d.serverStatement(ctx, conn, q, name)
}

// serverStatement runs q on conn (connecting when conn is nil or broken)
// and returns the connection to use next time: nil after a failure.
func (d *Dialect) serverStatement(ctx context.Context, conn *pgx.Conn, q string, args ...any) (*pgx.Conn, error) {
	if conn == nil || conn.IsClosed() {
		cfg := d.cfg.Copy()
		cfg.RuntimeParams["application_name"] += "-heartbeat"
		var err error
		if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return nil, err
		}
	}
	// Simple protocol and one statement: nothing stays on a pooler's
	// server connection.
	if err := statement(ctx, conn, q, args...); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
		return nil, err
	}
	return conn, nil
}
