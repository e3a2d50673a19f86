package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// probeTimeout bounds the wait for the LISTEN connection's own probe
// notification. A variable for the tests.
var probeTimeout = 10 * time.Second

// probePrefix starts a probe's payload, and probeSuffix ends it: a kind
// the tailers do not know (mvcc's notify*), so every replica reads
// everything once, as a replica's connection coming up makes it do anyway.
const (
	probePrefix = "probe-"
	probeSuffix = "-p"
)

// listenOnce connects, listens, and proves that notifications reach the
// connection before it says so (up): a pooler in transaction mode accepts
// LISTEN on whichever server connection it picks, then hands that one to
// other clients, and the notifications go with it, or nowhere. The proof
// is a notification sent from another connection (the endpoint's, as every
// replica's commits are) while this one waits: it arrives only where the
// session that listens is this connection's for good. Without it the
// connection is closed and ErrNoNotifications returned. listened reports
// whether it got as far as listening.
func (d *Dialect) listenOnce(ctx context.Context, up func(bool), wake func(string)) (listened bool, err error) {
	cfg := d.listenCfg.Copy()
	cfg.RuntimeParams["application_name"] += "-listen"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+channel); err != nil {
		return false, err
	}
	if err := d.probe(ctx, conn); err != nil {
		// Through a transaction pooler the LISTEN stays on a server
		// connection other clients go on using: take it back.
		_, _ = conn.Exec(ctx, `UNLISTEN *`, pgx.QueryExecModeSimpleProtocol)
		return false, err
	}
	// Only on a connection that is one session (the probe's proof): through
	// a pooler in transaction mode the lock would stay with a server
	// connection other clients go on using. Held for as long as this
	// connection lives: an import refuses to run while it is (LockImport).
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock_shared($1)`, pgx.QueryExecModeSimpleProtocol, int64(serveLockID)); err != nil {
		return false, err
	}
	d.serveLockHeld.Store(true)
	defer d.serveLockHeld.Store(false)
	// From here every committed notification arrives on conn, until an
	// error ends it: a lost connection, or the server ending the session.
	up(true)
	defer up(false)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, nil
		}
		wake(n.Payload)
	}
}

// probe sends a notification from a connection of the endpoint and waits
// for it on conn, which listens. What else arrives meanwhile is dropped:
// the tailer reads everything once the connection is up.
func (d *Dialect) probe(ctx context.Context, conn *pgx.Conn) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := probePrefix + hex.EncodeToString(b[:]) + probeSuffix
	sender, err := pgx.ConnectConfig(ctx, d.cfg.Copy())
	if err != nil {
		return err
	}
	// Simple protocol: no statement is left on a pooler's server connection.
	_, err = sender.Exec(ctx, `SELECT pg_notify($1, $2)`, pgx.QueryExecModeSimpleProtocol, channel, token)
	sender.Close(context.Background())
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err != nil && ctx.Err() == nil && wctx.Err() != nil:
			return fmt.Errorf("%w: LISTEN on %s received no notification in %v", mvcc.ErrNoNotifications, d.listenWhere(), probeTimeout)
		case err != nil:
			return err
		case n.Payload == token:
			return nil
		}
	}
}

// listenWhere names the LISTEN connection's server without credentials.
func (d *Dialect) listenWhere() string {
	return fmt.Sprintf("%s:%d/%s", d.listenCfg.Host, d.listenCfg.Port, d.listenCfg.Database)
}
