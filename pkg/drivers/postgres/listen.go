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

// statementTimeout bounds each statement of the side connections (the
// LISTEN connection, the probe's sender, the server row's): they run to
// their end even once the caller's context has ended, since a client that
// disconnects mid-statement makes a pooler cancel it on the server, which
// PgBouncer 1.18 to 1.20 can crash on (see cancelGrace).
const statementTimeout = 10 * time.Second

// statement runs one simple-protocol statement on conn whatever becomes of
// ctx meanwhile, within statementTimeout.
func statement(ctx context.Context, conn *pgx.Conn, sql string, args ...any) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	defer cancel()
	_, err := conn.Exec(sctx, sql, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	return err
}

// listenOnce connects, proves that notifications reach the connection,
// listens, and says so (up): a pooler in transaction mode accepts LISTEN
// on whichever server connection it picks, then hands that one to other
// clients, and the notifications go with it, or nowhere. The proof is a
// notification on a channel of the probe's own, sent from another
// connection (the endpoint's, as every replica's commits are) while this
// one waits: it arrives only where the session that listens is this
// connection's for good. A failed probe leaves its LISTEN on some server
// connection of the pooler's, but on a channel nobody sends to again, so
// that connection is never sent a notification it cannot pass on.
// Without the proof the connection is closed and ErrNoNotifications
// returned. listened reports whether it got as far as listening.
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
	if err := d.probe(ctx, conn); err != nil {
		return false, err
	}
	if err := statement(ctx, conn, listenSQL(channel)); err != nil {
		return false, err
	}
	// Only on a connection that is one session (the probe's proof): through
	// a pooler in transaction mode the lock would stay with a server
	// connection other clients go on using. Held for as long as this
	// connection lives: an import refuses to run while it is (LockImport).
	if err := statement(ctx, conn, serveLockHoldSQL, int64(serveLockID)); err != nil {
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
		if n.Channel == channel {
			wake(n.Payload)
		}
	}
}

// probe listens on conn on a channel of its own, sends a notification
// there from a connection of the endpoint and waits for it on conn.
func (d *Dialect) probe(ctx context.Context, conn *pgx.Conn) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	probeChannel := channel + "_probe_" + hex.EncodeToString(b[:])
	if err := statement(ctx, conn, listenSQL(probeChannel)); err != nil {
		return err
	}
	sender, err := pgx.ConnectConfig(ctx, d.cfg.Copy())
	if err != nil {
		return err
	}
	err = statement(ctx, sender, probeNotifySQL, probeChannel)
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
			return fmt.Errorf("%w: LISTEN on %s received no notification in %v (a pooler in transaction mode?); a direct connection for LISTEN (--datastore-listen-endpoint) brings the other replicas' commits at once",
				mvcc.ErrNoNotifications, d.listenWhere(), probeTimeout)
		case err != nil:
			return err
		case n.Channel == probeChannel:
			return statement(ctx, conn, unlistenSQL(probeChannel))
		}
	}
}

// listenWhere names the LISTEN connection's server without credentials.
func (d *Dialect) listenWhere() string {
	return fmt.Sprintf("%s:%d/%s", d.listenCfg.Host, d.listenCfg.Port, d.listenCfg.Database)
}
