package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// ReadOnlyDialect is implemented by dialects that can open their database
// for reading alone: no lock taken, nothing created or migrated, no row
// written, so that a tool may read a store a server is running on
// without disturbing it (quantykube check hash).
type ReadOnlyDialect interface {
	Dialect
	// OpenReadOnly opens a pool that reads the database. A database that
	// does not exist is an error, not created.
	OpenReadOnly(ctx context.Context) (*sql.DB, error)
}

// Reader reads a store without serving it (OpenReader).
type Reader struct {
	d   Dialect
	db  *sql.DB
	sql *Statements
	// Schema is the store's schema version.
	Schema int64
}

// OpenReader opens the store in d's database for reading only, whether
// or not a server runs on it: its schema must be the one this binary
// writes (a server migrates it when it starts).
func OpenReader(ctx context.Context, d Dialect) (*Reader, error) {
	ro, ok := d.(ReadOnlyDialect)
	if !ok {
		return nil, fmt.Errorf("%s: the dialect cannot open its database read-only", d.Name())
	}
	tables, err := d.Tables(ctx)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(tables, "meta") {
		return nil, fmt.Errorf("%s: %w", d.Name(), errNotStore)
	}
	db, err := ro.OpenReadOnly(ctx)
	if err != nil {
		return nil, err
	}
	r := &Reader{d: d, db: db, sql: d.Statements()}
	err = db.QueryRowContext(ctx, r.sql.Schema.Version).Scan(&r.Schema)
	if errors.Is(err, sql.ErrNoRows) {
		err = errNotStore
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: read the schema version: %w", d.Name(), err)
	}
	if want := int64(len(d.Migrations())); r.Schema != want {
		db.Close()
		return nil, fmt.Errorf("%s: the store's schema is version %d, this quantykube reads %d: start a server of the store's own version (or, to migrate it, this one) first", d.Name(), r.Schema, want)
	}
	return r, nil
}

// Close closes the reader's connections.
func (r *Reader) Close() error { return r.db.Close() }

// Hash is the state hash (hash.go) read from the database: revision 0 is
// the revision of the snapshot the live keys are read in.
func (r *Reader) Hash(ctx context.Context, q HashQuery) (*HashResult, error) {
	return hashState(ctx, r.db, r.sql, q, func(ctx context.Context) (rev, floor, logFloor int64, err error) {
		if err = r.db.QueryRowContext(ctx, r.sql.Meta.RevFloor).Scan(&rev, &floor); err != nil {
			return 0, 0, 0, err
		}
		err = r.db.QueryRowContext(ctx, r.sql.Meta.LogFloor).Scan(&logFloor)
		return rev, floor, logFloor, err
	}, true)
}
