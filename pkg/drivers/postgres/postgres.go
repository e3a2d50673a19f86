// Package postgres is the PostgreSQL dialect, on jackc/pgx/v5 through its
// database/sql adapter so the engine stays shared with SQLite (the write
// batch's pipelines use the pgx connection beneath it). Several
// QuantyKube processes may serve one database: the dialect implements
// mvcc.ReplicaDialect (a database-wide write lock per batch, LISTEN/NOTIFY
// wake-ups, leases whose deadlines live in the database).
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/internal/sqltrace"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/tls"
)

// Options tune the dialect; zero values take the defaults.
type Options struct {
	// Pool sizes the read pool (default max(8, 4*GOMAXPROCS) connections,
	// idle ones closed after 5 minutes); the writer always has exactly one
	// connection, the listener one more.
	Pool generic.ConnectionPoolConfig
	// TLS is the client certificate and CA for the server, used where the
	// endpoint URL does not name them (sslcert, sslkey, sslrootcert).
	TLS tls.Config
	// StatementTimeout is the statement_timeout of the pools' sessions
	// (connected directly) or of each of their transactions (through a
	// pooler); 0 leaves the server's (or the DSN's) setting.
	StatementTimeout time.Duration
	// ListenEndpoint, when set, is the database URL the LISTEN connection
	// uses instead of the endpoint's: a direct connection to PostgreSQL
	// where the endpoint is a pooler that cannot deliver notifications.
	ListenEndpoint string
}

// Dialect connects to one PostgreSQL database.
type Dialect struct {
	// cfg has only what every pooler accepts at startup (user, database,
	// application_name, the DSN's own parameters).
	cfg  *pgx.ConnConfig
	opts Options
	// listenCfg is the LISTEN connection's (ListenEndpoint's, or cfg).
	listenCfg *pgx.ConnConfig
	// execModeSet: the DSN chose pgx's default_query_exec_mode itself.
	execModeSet bool
	// setLocalTimeout gives a batch's transaction StatementTimeout behind
	// a pooler ("": none).
	setLocalTimeout string

	mu       sync.Mutex
	detected bool
	pooled   atomic.Bool // no proof of a direct connection (pooler.go)

	// serverID names this server's row in meta; serveLockHeld is whether
	// its LISTEN connection holds the serve lock (serverrow.go).
	serverID      string
	serveLockHeld atomic.Bool
}

// channel is the LISTEN/NOTIFY channel; notifications are per database.
const channel = "quantykube"

// migrateLockID is the advisory lock key taken around schema migration.
const migrateLockID = 0x5175616e74794b // "QuantyK"

// serveLockID is the advisory lock every server holds shared, on its
// LISTEN connection once that proved to be one session (listen.go), and
// checks when it opens the store (LockMigrate); an import takes it
// exclusive for its transaction (LockImport). Advisory locks are per
// database, and a session's go when it ends, a crashed server's included.
const serveLockID = 0x5175616e747953 // "QuantyS"

// New parses a postgres:// or postgresql:// URL. Every libpq-style parameter
// (sslmode, sslrootcert, sslcert, sslkey, connect_timeout, application_name,
// ...) goes through to pgx; unknown ones become session settings.
func New(dsn string, opts Options) (*Dialect, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return nil, fmt.Errorf("postgres: endpoint must start with postgres:// or postgresql://")
	}
	dsn, err := withTLSFiles(dsn, opts.TLS)
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(dsn, "endpoint")
	if err != nil {
		return nil, err
	}
	listenCfg := cfg
	if opts.ListenEndpoint != "" {
		ldsn := opts.ListenEndpoint
		if !strings.HasPrefix(ldsn, "postgres://") && !strings.HasPrefix(ldsn, "postgresql://") {
			return nil, fmt.Errorf("postgres: the listen endpoint must start with postgres:// or postgresql://")
		}
		if ldsn, err = withTLSFiles(ldsn, opts.TLS); err != nil {
			return nil, err
		}
		if listenCfg, err = parseConfig(ldsn, "listen endpoint"); err != nil {
			return nil, err
		}
	}
	if opts.Pool.MaxIdleTime == 0 {
		opts.Pool.MaxIdleTime = 5 * time.Minute
	}
	d := &Dialect{cfg: cfg, listenCfg: listenCfg, opts: opts, execModeSet: strings.Contains(dsn, "default_query_exec_mode="), serverID: newServerID()}
	if ms := opts.StatementTimeout.Milliseconds(); ms > 0 {
		d.setLocalTimeout = setLocalTimeoutSQL(ms)
	}
	return d, nil
}

// parseConfig parses a database URL with QuantyKube's defaults: a 10 s
// connect timeout and application_name quantykube, unless it names them.
func parseConfig(dsn, what string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN, password included.
		return nil, fmt.Errorf("postgres: cannot parse the %s URL (check its syntax and parameters)", what)
	}
	if !strings.Contains(dsn, "connect_timeout=") {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "quantykube"
	}
	if rec := sqltrace.Recorder(); rec != nil {
		cfg.Tracer = tracer{rec: rec}
	}
	return cfg, nil
}

// poolConfig is the pools' connection configuration, once the first call
// has found whether the endpoint is PostgreSQL itself (pooler.go): there,
// the statement timeout is a session setting and statements are prepared
// once per connection; behind a pooler, neither outlives a transaction.
func (d *Dialect) poolConfig(ctx context.Context) (*pgx.ConnConfig, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.detected {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ok, err := direct(dctx, d.cfg.Copy())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("postgres: connect to %s: %w", d.where(), err)
		}
		d.detected = true
		d.pooled.Store(!ok)
	}
	cfg := d.cfg.Copy()
	switch {
	case !d.pooled.Load() && d.opts.StatementTimeout > 0:
		cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(d.opts.StatementTimeout.Milliseconds(), 10)
	case d.pooled.Load() && !d.execModeSet:
		cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	return cfg, nil
}

// Pooled reports whether the dialect found no proof that it talks to
// PostgreSQL directly and keeps to what works through a pooler (known
// once a pool was opened).
func (d *Dialect) Pooled() bool { return d.pooled.Load() }

func (d *Dialect) Name() string { return "postgres" }

func (d *Dialect) Open(ctx context.Context) (writer, reader *sql.DB, err error) {
	cfg, err := d.poolConfig(ctx)
	if err != nil {
		return nil, nil, err
	}
	writer = d.openDB(cfg)
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := writer.PingContext(pctx); err != nil {
		writer.Close()
		return nil, nil, fmt.Errorf("postgres: connect to %s: %w", d.where(), err)
	}
	// Read transactions ask for REPEATABLE READ themselves (mvcc's readTx):
	// a session default would not reach a pooler's server connections.
	reader = d.openDB(cfg)
	d.opts.Pool.Apply(reader, max(8, 4*runtime.GOMAXPROCS(0)))
	return writer, reader, nil
}

// where names the server without credentials, for error messages.
func (d *Dialect) where() string {
	return fmt.Sprintf("%s:%d/%s", d.cfg.Host, d.cfg.Port, d.cfg.Database)
}

func (d *Dialect) Migrations() [][]string {
	return [][]string{{
		// log: one row per key change. id identifies a row (prev_kv joins
		// on it); revisions never come from it: they come from meta.rev,
		// updated under the batch lock.
		`CREATE TABLE log (
			id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
			rev BIGINT NOT NULL,
			sub BIGINT NOT NULL,
			key BYTEA NOT NULL,
			value BYTEA,
			create_rev BIGINT NOT NULL,
			version BIGINT NOT NULL,
			lease BIGINT NOT NULL,
			deleted SMALLINT NOT NULL,
			unix_ms BIGINT NOT NULL)`,
		`CREATE UNIQUE INDEX log_rev ON log (rev, sub)`,
		`CREATE INDEX log_key_rev ON log (key, rev)`,
		`CREATE TABLE current (
			key BYTEA NOT NULL PRIMARY KEY,
			value BYTEA,
			create_rev BIGINT NOT NULL,
			mod_rev BIGINT NOT NULL,
			version BIGINT NOT NULL,
			lease BIGINT NOT NULL)`,
		`CREATE INDEX current_lease ON current (lease) WHERE lease <> 0`,
		// renewed_ms is the database clock at the last grant or renewal:
		// every replica reads deadlines from one clock.
		`CREATE TABLE leases (
			id BIGINT NOT NULL PRIMARY KEY,
			ttl BIGINT NOT NULL,
			renewed_ms BIGINT NOT NULL DEFAULT ` + nowMs + `)`,
	}, {
		// History: revision by time, and retention's per-rule progress
		// (the same schema version as SQLite's).
		`CREATE INDEX log_unix_ms ON log (unix_ms, rev)`,
		`CREATE TABLE retention (
			prefix BYTEA NOT NULL PRIMARY KEY,
			floor BIGINT NOT NULL,
			floor_unix_ms BIGINT NOT NULL,
			cursor BIGINT NOT NULL)`,
		`INSERT INTO meta (name, value) VALUES ('retain_floor', 0)`,
	}, {
		// Each value is stored once, in the log (ADR-014): a live key's
		// value is its log row at (key, mod_rev). mvcc checks first that
		// every current row has that row.
		`ALTER TABLE current DROP COLUMN value`,
	}}
}

// OwnedBlobs (mvcc.OwnedBlobs): pgx's database/sql driver (stdlib.Rows)
// scans every bytea column of every row into a new slice, which it never
// writes again; TestDriverBlobsAreOwned checks it.
func (d *Dialect) OwnedBlobs() {}

func (d *Dialect) Size(ctx context.Context, db *sql.DB) (total, inUse int64, err error) {
	err = db.QueryRowContext(ctx, sizeSQL).Scan(&total, &inUse)
	return total, inUse, err
}

// Defragment vacuums QuantyKube's tables: dead row versions become reusable
// space (PostgreSQL returns space to the OS only at the tables' ends).
func (d *Dialect) Defragment(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, defragmentSQL)
	return err
}

// Tables lists the tables and views of the schema unqualified names
// resolve to, where the migrations make the store's, on a connection of
// its own. From the catalog: information_schema leaves out what the role
// has no privilege on, which would make another's database look empty.
func (d *Dialect) Tables(ctx context.Context) ([]string, error) {
	cfg, err := d.poolConfig(ctx)
	if err != nil {
		return nil, err
	}
	db := d.openDB(cfg)
	defer db.Close()
	names, err := generic.QueryStrings(ctx, db, tablesSQL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", d.where(), err)
	}
	return names, nil
}

// LockMigrate also refuses to open a store an import is writing
// (LockImport holds the serve lock exclusively): loaded mid-import, the
// server would answer from the empty store. The session that holds the
// import's lock passes, as a session's own locks never conflict.
func (d *Dialect) LockMigrate(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, migrateLockSQL, int64(migrateLockID)); err != nil {
		return err
	}
	var free bool
	if err := tx.QueryRowContext(ctx, serveLockSharedSQL, int64(serveLockID)).Scan(&free); err != nil {
		return err
	}
	if !free {
		return fmt.Errorf("an import into %s is running: start the server once it has ended", d.where())
	}
	return nil
}

func (d *Dialect) Notify(ctx context.Context, ex mvcc.Execer, payload string) error {
	_, err := ex.ExecContext(ctx, notifySQL, payload)
	return err
}

// Listen holds one dedicated connection in LISTEN; it reconnects with
// backoff (100 ms doubling to 5 s) while the database is away. It returns
// mvcc.ErrNoNotifications when a notification sent from another
// connection does not reach it (listen.go).
func (d *Dialect) Listen(ctx context.Context, up func(bool), wake func(payload string)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		listened, err := d.listenOnce(ctx, up, wake)
		if errors.Is(err, mvcc.ErrNoNotifications) {
			return err
		}
		if listened {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

func (d *Dialect) Leases(ctx context.Context, db *sql.DB) ([]mvcc.LeaseRow, error) {
	return generic.Leases(ctx, db, leasesSQL)
}

func (d *Dialect) RenewLease(ctx context.Context, db *sql.DB, id int64, notify string) (int64, bool, error) {
	// READ COMMITTED: a renewal racing an expiry waits for it and then
	// finds the lease gone, instead of failing to serialize.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback()
	var ttl int64
	err = tx.QueryRowContext(ctx, renewLeaseSQL, id).Scan(&ttl)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	// Sent at commit, or not at all: the other replicas follow leases by
	// their notifications only, and one that missed a renewal would report
	// the old deadline and, from it on, try to expire the lease at every
	// lease check (each a write batch that finds it renewed).
	if notify != "" {
		if err := d.Notify(ctx, tx, notify); err != nil {
			return 0, false, err
		}
	}
	return ttl, true, tx.Commit()
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

// LockImport takes the serve lock exclusively for the import's
// transaction: granted only while no server's LISTEN connection holds it,
// and every server opening the store meanwhile is refused (LockMigrate).
// Transaction-scoped, as the import is one transaction: a session lock
// taken through a pooler in transaction mode would stay with a server
// connection after the import, and refuse every server for as long as that
// connection lived. A server whose LISTEN connection does not hold the
// lock (a reconnect, or a connection without notifications behind a
// pooler, ADR-026) is seen by its unexpired row in meta (serverrow.go).
func (d *Dialect) LockImport(ctx context.Context, tx *sql.Tx) error {
	var ok bool
	if err := tx.QueryRowContext(ctx, serveLockImportSQL, int64(serveLockID)).Scan(&ok); err != nil {
		return fmt.Errorf("lock %s for the import: %w", d.where(), err)
	}
	if !ok {
		return fmt.Errorf("a QuantyKube server is connected to %s: stop every replica before importing", d.where())
	}
	var hasMeta bool
	if err := tx.QueryRowContext(ctx, hasMetaSQL).Scan(&hasMeta); err != nil {
		return fmt.Errorf("lock %s for the import: %w", d.where(), err)
	}
	if !hasMeta {
		return nil
	}
	var n, left int64
	if err := tx.QueryRowContext(ctx, serverRowsLiveSQL).Scan(&n, &left); err != nil {
		return fmt.Errorf("reading the servers' rows in %s: %w", d.where(), err)
	}
	if n > 0 {
		return fmt.Errorf("a QuantyKube server is connected to %s (%d renewed their row in meta within %v, through a pooler): stop every replica before importing; a server that crashed lets go %d s from now",
			d.where(), n, serverExpiry, left)
	}
	return nil
}

var (
	_ mvcc.Dialect        = (*Dialect)(nil)
	_ mvcc.ReplicaDialect = (*Dialect)(nil)
)

// withTLSFiles adds BackendTLSConfig's files to the endpoint URL as libpq
// parameters, unless the URL names them itself (as kine does).
func withTLSFiles(dsn string, t tls.Config) (string, error) {
	params := [][2]string{{"sslrootcert", t.CAFile}, {"sslcert", t.CertFile}, {"sslkey", t.KeyFile}}
	if t.CAFile == "" && t.CertFile == "" && t.KeyFile == "" {
		return dsn, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("postgres: cannot parse the endpoint URL (check its syntax and parameters)")
	}
	q := u.Query()
	for _, p := range params {
		if p[1] != "" && !q.Has(p[0]) {
			q.Set(p[0], p[1])
		}
	}
	if t.SkipVerify && !q.Has("sslmode") {
		q.Set("sslmode", "require") // encrypted, not verified
	} else if t.CAFile != "" && !q.Has("sslmode") {
		q.Set("sslmode", "verify-full")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// OpenReadOnly opens a pool of one connection that reads the store
// (mvcc.ReadOnlyDialect): no lock, no row in meta, no LISTEN, so a server
// running on the database does not see it.
func (d *Dialect) OpenReadOnly(ctx context.Context) (*sql.DB, error) {
	cfg, err := d.poolConfig(ctx)
	if err != nil {
		return nil, err
	}
	db := d.openDB(cfg)
	db.SetMaxOpenConns(1)
	return db, nil
}

var _ mvcc.ReadOnlyDialect = (*Dialect)(nil)
