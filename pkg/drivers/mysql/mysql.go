// Package mysql is the MySQL and MariaDB dialect, on go-sql-driver/mysql.
// Several QuantyKube processes may serve one database: the dialect
// implements mvcc.ReplicaDialect as the PostgreSQL dialect does (a database-wide
// write lock per batch, leases whose deadlines live in the database), but
// MySQL has no LISTEN/NOTIFY: the other replicas' commits are polled
// (Listen), and a server tells an import it is up by a row in meta
// (Announce). Written for MySQL 8.0 and MariaDB 10.5 or later with InnoDB;
// docs/mysql.md says which versions were tested.
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quantyroot/quantykube/pkg/drivers/generic"
	"github.com/quantyroot/quantykube/pkg/internal/sqltrace"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	qtls "github.com/quantyroot/quantykube/pkg/tls"
)

// Options tune the dialect; zero values take the defaults.
type Options struct {
	// Pool sizes the read pool (default max(8, 4*GOMAXPROCS) connections,
	// idle ones closed after 5 minutes); the writer always has exactly one
	// connection.
	Pool generic.ConnectionPoolConfig
	// TLS is the client certificate and CA for the server, used unless the
	// endpoint names a tls= parameter itself.
	TLS qtls.Config
	// StatementTimeout bounds each statement of the pools' sessions
	// (max_statement_time on MariaDB, max_execution_time for reads on
	// MySQL); 0 leaves the server's setting.
	StatementTimeout time.Duration
}

// Dialect connects to one MySQL or MariaDB database.
type Dialect struct {
	cfg  *mysql.Config
	opts Options
	// maxPacket is the server's max_allowed_packet, known once Open ran:
	// a batch's statements are sent in packets below it (batch.go).
	maxPacket atomic.Int64
	// mariaDB: the server is MariaDB (known once Open or Tables ran).
	mariaDB atomic.Bool
	// serverID names this server's row in meta (serverrow.go).
	serverID string
}

// DefaultDatabase is the database an endpoint without one names, as kine's.
const DefaultDatabase = "kubernetes"

// minPacket is the smallest max_allowed_packet the dialect accepts: a
// statement carrying one value of etcd's largest request (1.5 MiB), which
// escaping may double, must fit in one packet.
const minPacket = 4 << 20

// New parses a mysql:// endpoint, in either form kine accepts:
// mysql://user:password@tcp(host:port)/db?param=value (go-sql-driver's
// DSN behind the scheme) or mysql://user:password@host:port/db?param=value.
// Parameters are go-sql-driver's (tls, timeout, charset, ...); unknown
// ones become session variables. The database defaults to kubernetes.
func New(dsn string, opts Options) (*Dialect, error) {
	rest, ok := strings.CutPrefix(dsn, "mysql://")
	if !ok {
		return nil, errors.New("mysql: endpoint must start with mysql://")
	}
	cfg, err := parseDSN(rest)
	if err != nil {
		return nil, err
	}
	if cfg.DBName == "" {
		cfg.DBName = DefaultDatabase
	}
	if strings.ContainsAny(cfg.DBName, "`/\\.") {
		return nil, fmt.Errorf("mysql: database name %q: use letters, digits, _ and $", cfg.DBName)
	}
	if cfg.TLS == nil && cfg.TLSConfig == "" {
		tc, err := opts.TLS.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("mysql: %w", err)
		}
		if tc != nil {
			host, _, err := net.SplitHostPort(cfg.Addr)
			if err != nil {
				host = cfg.Addr
			}
			tc.ServerName = host
			cfg.TLS = tc
		}
	}
	if opts.Pool.MaxIdleTime == 0 {
		opts.Pool.MaxIdleTime = 5 * time.Minute
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	// One round trip per statement with arguments (instead of prepare,
	// execute, close), and a batch's statements sent together (batch.go).
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	// Affected rows count the rows matched, as PostgreSQL's do: an UPDATE
	// that sets a row to what it holds still counts it.
	cfg.ClientFoundRows = true
	cfg.Logger = quietLogger{}
	d := &Dialect{cfg: cfg, opts: opts, serverID: newServerID()}
	return d, nil
}

// parseDSN reads kine's go-sql-driver form when the part after the user
// names a protocol (tcp(...), unix(...)), and the URL form otherwise.
func parseDSN(rest string) (*mysql.Config, error) {
	if rest == "" {
		return nil, errors.New("mysql: the endpoint names no server: mysql://user:password@tcp(host:3306)/database or mysql://user:password@host:3306/database")
	}
	at := strings.LastIndex(rest, "@")
	afterUser := rest[at+1:]
	if strings.HasPrefix(afterUser, "tcp(") || strings.HasPrefix(afterUser, "tcp6(") || strings.HasPrefix(afterUser, "unix(") || strings.HasPrefix(afterUser, "/") {
		cfg, err := mysql.ParseDSN(rest)
		if err != nil {
			// The driver's message may quote the DSN, password included.
			return nil, errors.New("mysql: cannot parse the endpoint (want mysql://user:password@tcp(host:3306)/database?param=value)")
		}
		return cfg, nil
	}
	u, err := url.Parse("mysql://" + rest)
	if err != nil || u.Host == "" {
		return nil, errors.New("mysql: cannot parse the endpoint URL (want mysql://user:password@host:3306/database?param=value)")
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	// The driver parses the address, database and parameters; the user and
	// password are set apart, since either may hold what its DSN syntax
	// reserves ('@', '/', ':').
	rest = "tcp(" + host + ")/" + url.PathEscape(strings.TrimPrefix(u.Path, "/"))
	if u.RawQuery != "" {
		rest += "?" + u.RawQuery
	}
	cfg, err := mysql.ParseDSN(rest)
	if err != nil {
		return nil, errors.New("mysql: cannot parse the endpoint URL's parameters (they are go-sql-driver/mysql's: tls, timeout, ...)")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, nil
}

type quietLogger struct{}

// Print drops the driver's own messages (a bad idle connection it closes
// and replaces): the errors that matter reach the caller.
func (quietLogger) Print(...any) {}

func (d *Dialect) Name() string { return "mysql" }

// where names the server without credentials, for error messages.
func (d *Dialect) where() string { return d.cfg.Addr + "/" + d.cfg.DBName }

// sessionSetup is run on every connection: strict mode, so that a key or
// value too long for its column fails instead of being cut, and no mode
// that changes how the engine's SQL parses (ANSI_QUOTES, PIPES_AS_CONCAT).
func (d *Dialect) sessionSetup(writer bool) []string {
	qs := []string{strictModeSQL}
	if writer {
		// Each statement of a batch reads what committed before it, as on
		// PostgreSQL: the batch reads the state after taking its lock, and
		// InnoDB takes no gap locks, which would make batches and
		// retention's deletes wait on each other.
		qs = append(qs, readCommittedSQL)
	}
	if ms := d.opts.StatementTimeout.Milliseconds(); ms > 0 {
		qs = append(qs, statementTimeoutSQL(d.timeoutVar(ms)))
	}
	return qs
}

// newConnector is go-sql-driver's connector for cfg (recorded while a
// statement-list test runs, sqltrace).
func newConnector(cfg *mysql.Config) (driver.Connector, error) {
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sqltrace.Connector(c), nil
}

func (d *Dialect) connector(cfg *mysql.Config, writer bool) (*connector, error) {
	base, err := newConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return &connector{base: base, setup: d.sessionSetup(writer)}, nil
}

func (d *Dialect) Open(ctx context.Context) (writer, reader *sql.DB, err error) {
	if _, err := d.detect(ctx, true); err != nil {
		return nil, nil, err
	}
	wc, err := d.connector(d.cfg, true)
	if err != nil {
		return nil, nil, err
	}
	writer = sql.OpenDB(wc)
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var packet int64
	if err := writer.QueryRowContext(pctx, maxPacketSQL).Scan(&packet); err != nil {
		writer.Close()
		return nil, nil, fmt.Errorf("mysql: connect to %s: %w", d.where(), err)
	}
	if packet < minPacket {
		writer.Close()
		return nil, nil, fmt.Errorf("mysql: %s has max_allowed_packet = %d: etcd's largest request needs at least %d (set max_allowed_packet = 64M in the server's configuration)", d.where(), packet, minPacket)
	}
	d.maxPacket.Store(packet)
	var logBin, syncBinlog, flushAtCommit int64
	if err := writer.QueryRowContext(pctx, durabilitySQL).Scan(&logBin, &syncBinlog, &flushAtCommit); err != nil {
		writer.Close()
		return nil, nil, fmt.Errorf("mysql: read %s's durability settings: %w", d.where(), err)
	}
	if why := durabilityGap(logBin != 0, syncBinlog, flushAtCommit); why != "" {
		slog.Warn("the database server's settings let a crash of it lose what QuantyKube showed or acknowledged", "server", d.where(), "why", why)
	}
	rc, err := d.connector(d.cfg, false)
	if err != nil {
		writer.Close()
		return nil, nil, err
	}
	// Read transactions ask for REPEATABLE READ themselves (mvcc's readTx).
	reader = sql.OpenDB(rc)
	d.opts.Pool.Apply(reader, max(8, 4*runtime.GOMAXPROCS(0)))
	return writer, reader, nil
}

// detect connects to learn the server (for the statement timeout's
// variable) and whether the database exists; with create it creates the
// database when it does not, as kine does: an endpoint kine served works
// unchanged, and a new one needs no step before the first start.
func (d *Dialect) detect(ctx context.Context, create bool) (exists bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg := d.cfg.Clone()
	cfg.DBName = ""
	c, err := newConnector(cfg)
	if err != nil {
		return false, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var version string
	if err := db.QueryRowContext(dctx, versionSQL).Scan(&version); err != nil {
		return false, fmt.Errorf("mysql: connect to %s: %w", d.where(), err)
	}
	d.mariaDB.Store(strings.Contains(strings.ToLower(version), "mariadb"))
	var n int
	if err := db.QueryRowContext(dctx, databaseExistsSQL, d.cfg.DBName).Scan(&n); err != nil {
		return false, fmt.Errorf("mysql: %s: %w", d.where(), err)
	}
	if n > 0 || !create {
		return n > 0, nil
	}
	// utf8mb4_bin: meta's names compare as bytes, as on the other databases.
	if _, err := db.ExecContext(dctx, createDatabaseSQL(d.cfg.DBName)); err != nil {
		return false, fmt.Errorf("mysql: create the database %s: %w", d.where(), err)
	}
	return true, nil
}

// timeoutVar is the session variable that bounds a statement: MariaDB's
// max_statement_time (seconds, every statement), or MySQL's
// max_execution_time (milliseconds, read-only SELECTs only: MySQL has no
// bound for writes).
func (d *Dialect) timeoutVar(ms int64) string {
	if d.mariaDB.Load() {
		return fmt.Sprintf("max_statement_time = %.3f", float64(ms)/1000)
	}
	return fmt.Sprintf("max_execution_time = %d", ms)
}

func (d *Dialect) Size(ctx context.Context, db *sql.DB) (total, inUse int64, err error) {
	err = db.QueryRowContext(ctx, sizeSQL).Scan(&total, &inUse)
	return total, inUse, err
}

// Defragment rebuilds QuantyKube's tables (OPTIMIZE TABLE, which InnoDB
// runs as an online rebuild): the space of deleted rows goes back to the
// file system with innodb_file_per_table, the default.
func (d *Dialect) Defragment(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, defragmentSQL)
	return err
}

// Tables lists the tables and views of the endpoint's database, on a
// connection of its own; a database that does not exist yet has none.
func (d *Dialect) Tables(ctx context.Context) ([]string, error) {
	if exists, err := d.detect(ctx, false); err != nil || !exists {
		return nil, err
	}
	c, err := newConnector(d.cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	names, err := generic.QueryStrings(ctx, db, tablesSQL)
	if err != nil {
		return nil, fmt.Errorf("mysql: %s: %w", d.where(), err)
	}
	return names, nil
}

// errNotMySQL is a connection that is not go-sql-driver's.
var errNotMySQL = errors.New("mysql: the driver's connection does not run statements directly")

var (
	_ mvcc.Dialect        = (*Dialect)(nil)
	_ mvcc.ReplicaDialect = (*Dialect)(nil)
)

// Where names the server and database without credentials.
func (d *Dialect) Where() string { return d.where() }

// OpenSource opens the database of the endpoint dsn for reading another
// program's tables (kine's, which an import reads): one connection, a
// read-only session, and a database that does not exist is an error
// rather than made.
func OpenSource(ctx context.Context, dsn string, t qtls.Config) (*sql.DB, string, error) {
	d, err := New(dsn, Options{TLS: t})
	if err != nil {
		return nil, "", err
	}
	exists, err := d.detect(ctx, false)
	if err != nil {
		return nil, "", err
	}
	if !exists {
		return nil, "", fmt.Errorf("mysql: %s: no such database", d.where())
	}
	c, err := d.connector(d.cfg, false)
	if err != nil {
		return nil, "", err
	}
	c.setup = append(c.setup, readOnlySQL)
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	return db, d.where(), nil
}

// durabilityGap says what in the server's settings leaves a commit
// undurable when it is acknowledged or seen, or "" when nothing does.
// InnoDB makes a commit visible to other sessions before it flushes the
// commit's redo: without the binary log synced at each commit (whose
// group commit makes the redo durable first), a server crash can lose a
// revision another replica already read and sent to its watchers.
// QuantyKube then moves the revision past it and cancels every watch
// (ADR-027): nothing is handed out twice, but every client relists.
// docs/mysql.md measured it on MariaDB 10.11.
func durabilityGap(logBin bool, syncBinlog, flushAtCommit int64) string {
	switch {
	case flushAtCommit != 1:
		return fmt.Sprintf("innodb_flush_log_at_trx_commit = %d: acknowledged commits can be lost; set it to 1", flushAtCommit)
	case !logBin:
		return "the binary log is off: a commit is visible to other sessions before it is durable; set log_bin and sync_binlog = 1"
	case syncBinlog != 1:
		return fmt.Sprintf("sync_binlog = %d: a commit is visible to other sessions before it is durable; set sync_binlog = 1", syncBinlog)
	}
	return ""
}

// OpenReadOnly opens a pool of one connection that reads the store
// (mvcc.ReadOnlyDialect): no lock, no row in meta, and a database that
// does not exist is an error rather than made.
func (d *Dialect) OpenReadOnly(ctx context.Context) (*sql.DB, error) {
	exists, err := d.detect(ctx, false)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("mysql: %s: no such database", d.where())
	}
	rc, err := d.connector(d.cfg, false)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(rc)
	db.SetMaxOpenConns(1)
	return db, nil
}

var _ mvcc.ReadOnlyDialect = (*Dialect)(nil)
