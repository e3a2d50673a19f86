// Package generic holds what the dialects share: the connection pool
// settings, under the name and path kine gives them (kine's
// pkg/drivers/generic), so that a program that embeds kine builds against
// QuantyKube by changing the module path; the helpers a dialect writes
// its statements of each shape with (shapes.go); and small query helpers
// that run a dialect's statement.
package generic

import (
	"context"
	"database/sql"
	"time"
)

// ConnectionPoolConfig sizes a dialect's pool of read connections. The
// writer always has exactly one connection of its own.
type ConnectionPoolConfig struct {
	MaxIdle     int           // zero means as many as MaxOpen; negative means none
	MaxOpen     int           // zero means the dialect's default
	MaxLifetime time.Duration // zero means connections are reused forever
	MaxIdleTime time.Duration // zero means idle connections are kept
}

// Apply sizes db, with defaultOpen when MaxOpen is zero or negative.
func (c ConnectionPoolConfig) Apply(db *sql.DB, defaultOpen int) {
	open := c.MaxOpen
	if open <= 0 {
		open = defaultOpen
	}
	idle := c.MaxIdle
	switch {
	case idle == 0 || idle > open:
		idle = open
	case idle < 0:
		idle = 0
	}
	db.SetMaxOpenConns(open)
	db.SetMaxIdleConns(idle)
	db.SetConnMaxLifetime(c.MaxLifetime)
	db.SetConnMaxIdleTime(c.MaxIdleTime)
}

// QueryStrings runs a query whose rows are one string each.
func QueryStrings(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
