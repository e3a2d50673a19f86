package pgtest

import (
	"context"

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
