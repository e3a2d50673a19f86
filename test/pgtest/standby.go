package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// standbyTables are the store's tables, as a standby holds them.
var standbyTables = []string{"log", "current", "meta", "leases", "retention"}

// SaveStandby copies the store's tables in the database at dsn, as an
// asynchronous standby holds them at this moment; Failover makes the
// database that copy again.
func SaveStandby(ctx context.Context, dsn string) error {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, t := range standbyTables {
		if _, err := conn.Exec(ctx, `CREATE TABLE standby_`+t+` AS SELECT * FROM `+t); err != nil {
			return err
		}
	}
	return nil
}

// Failover does to the database at dsn what a promotion of the standby
// SaveStandby copied does to the servers that follow it: the commits since
// the copy are gone, and every session of the old primary ends.
func Failover(ctx context.Context, dsn string) error {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, t := range standbyTables {
			if _, err := tx.Exec(ctx, `DELETE FROM `+t); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+t+` SELECT * FROM standby_`+t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	return err
}

// connect opens one connection that works through a pooler too.
func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, cfg)
}

// Standby makes a streaming standby of c (pg_basebackup -R, with a fast
// checkpoint: without one it waits for the next checkpoint, minutes) in a
// new directory and starts it on a port of its own. Destroy removes it.
func (c *Cluster) Standby(ctx context.Context) (*Cluster, error) { return c.StandbyOn(ctx, 0) }

// StandbyOn is Standby on the given port (0: a free one), so that a
// standby can take the place of a server that is gone, under a
// multi-host DSN that names that port.
func (c *Cluster) StandbyOn(ctx context.Context, port int) (*Cluster, error) {
	s := &Cluster{bin: c.bin, uid: c.uid, gid: c.gid}
	dir, err := os.MkdirTemp("", "quanty-pg-standby-")
	if err != nil {
		return nil, err
	}
	s.Dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if s.uid >= 0 {
		if err := os.Chown(dir, s.uid, s.gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if out, err := s.run(ctx, "pg_basebackup", "-D", s.data(), "-R", "-c", "fast", "-X", "stream",
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	// The copied configuration puts the socket in c's directory, which
	// may go before s does.
	f, err := os.OpenFile(filepath.Join(s.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString("\nunix_socket_directories = '" + dir + "'\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: configuring the standby: %w", err)
	}
	if err := s.reapOnExit(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if port != 0 {
		s.Port = port
		if err := s.Start(ctx); err != nil {
			s.Destroy()
			return nil, err
		}
		return s, nil
	}
	for attempt := 0; attempt < 5; attempt++ {
		if s.Port, err = freePort(); err != nil {
			break
		}
		if err = s.Start(ctx); err == nil {
			return s, nil
		}
	}
	s.Destroy()
	return nil, err
}

// RequireSynchronous makes c a synchronous primary
// (synchronous_standby_names = '*', synchronous_commit = on): a commit
// returns once a standby has flushed it. It waits until a standby streams
// as synchronous, so that no commit after it is acknowledged by c alone.
func (c *Cluster) RequireSynchronous(ctx context.Context) error {
	conn, err := connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `ALTER SYSTEM SET synchronous_commit = on`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("pgtest: %s: %w", q, err)
		}
	}
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`).Scan(&n); err != nil {
			return fmt.Errorf("pgtest: reading pg_stat_replication: %w", err)
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: no synchronous standby streams: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Promote ends a standby's recovery: it becomes a primary.
func (c *Cluster) Promote(ctx context.Context) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data(), "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl promote: %v\n%s", err, out)
	}
	return nil
}
