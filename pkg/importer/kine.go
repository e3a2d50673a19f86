package importer

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
)

// kine keeps every revision as a row of one table, kine: id is the
// revision, name the key; a key's live row is its newest row, unless that
// row is a delete (so the gap-REV rows kine writes to fill a revision a
// failed insert left empty, always deletes, are never read as keys). Some
// live rows are kine's own and are left out:
const (
	// kineCompactKey's row records kine's compact revision.
	kineCompactKey = "compact_rev_key"
	// kineAPICompactKey is where kine keeps kube-apiserver's own
	// compact_rev_key, its version encoded in the value ("VERSION|VALUE"),
	// because kine does not count versions. It is imported as
	// kube-apiserver wrote it, as kine shows it through the etcd API.
	kineAPICompactKey = "compact_rev_key_apiserver"
	// kineHealthKey is written by kine itself at every start.
	kineHealthKey = "/registry/health"
)

// The reasons Summary.Skipped counts.
const (
	SkippedKineCompactMarker = "kine's compaction marker (compact_rev_key)"
	SkippedKineHealthKey     = "kine's health key (" + kineHealthKey + ")"
)

type kineSource struct {
	db       *sql.DB
	name     string
	postgres bool
	mysql    bool
}

func openKineSQLite(ctx context.Context, path string) (Source, error) {
	if path == "" {
		return nil, errors.New("import: the sqlite source names no file")
	}
	// Read-only, so that a missing file is an error rather than a new
	// empty database.
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("import: kine database: %w", err)
	}
	db, err := sqlite.OpenReadOnly(path)
	if err != nil {
		return nil, fmt.Errorf("import: open kine database %s: %w", path, err)
	}
	k := &kineSource{db: db, name: "kine (sqlite " + path + ")"}
	return k, k.check(ctx)
}

func openKinePostgres(ctx context.Context, dsn string) (Source, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN, password included.
		return nil, errors.New("import: cannot parse the postgres source URL (check its syntax and parameters)")
	}
	// A second guard besides the read-only transaction: this session
	// cannot write.
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "quantykube-import"
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(1)
	where := fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	k := &kineSource{db: db, name: "kine (postgres " + where + ")", postgres: true}
	return k, k.check(ctx)
}

// check fails early, with a clear message, on a database that is not kine's.
func (k *kineSource) check(ctx context.Context) error {
	var n int64
	if err := k.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM kine WHERE id < 0`).Scan(&n); err != nil {
		k.db.Close()
		return fmt.Errorf("import: %s has no readable kine table (is it a kine database?): %w", k.name, err)
	}
	return nil
}

func (k *kineSource) String() string { return k.name }

func (k *kineSource) Close() error { return k.db.Close() }

// kineLiveSQL is every key's live row, in key order (byte order: kube-apiserver's
// compact key is placed where the name it is imported under sorts), with
// its create revision (a create row stores none: its own id is it) and
// its version, which kine does not keep: the number of its rows since its
// create that compaction has left, so at least 1.
const kineLiveSQL = `SELECT k.name, k.value, k.id, k.created_rev, k.lease,
	(SELECT COUNT(*) FROM kine v WHERE v.name = k.name AND v.id >= k.created_rev AND v.id <= k.id)
FROM (SELECT id, name, value, lease, deleted,
		CASE WHEN created <> 0 THEN id ELSE COALESCE(NULLIF(create_revision, 0), id) END AS created_rev
	FROM kine WHERE id IN (SELECT MAX(id) FROM kine GROUP BY name)) AS k
WHERE k.deleted = 0
ORDER BY CASE WHEN k.name = '` + kineAPICompactKey + `' THEN '` + kineCompactKey + `' ELSE k.name END`

func (k *kineSource) Read(ctx context.Context, sink Sink) (Summary, error) {
	var sum Summary
	opts := &sql.TxOptions{}
	if k.postgres || k.mysql {
		// One snapshot for every statement below.
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	// On SQLite a read transaction sees one snapshot from its first read.
	tx, err := k.db.BeginTx(ctx, opts)
	if err != nil {
		return sum, fmt.Errorf("import: %s: begin a read transaction: %w", k.name, err)
	}
	defer tx.Rollback()
	var rev sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(id) FROM kine`).Scan(&rev); err != nil {
		return sum, fmt.Errorf("import: %s: read the revision: %w", k.name, err)
	}
	if !rev.Valid {
		return sum, fmt.Errorf("import: %s: the kine table is empty (kine writes its first row when it starts)", k.name)
	}
	sum.Rev = rev.Int64
	q := kineLiveSQL
	switch {
	case k.postgres:
		q += ` COLLATE "C"`
	case k.mysql:
		q = kineLiveMySQL
	}
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return sum, fmt.Errorf("import: %s: read the keys: %w", k.name, err)
	}
	defer rows.Close()
	leases := map[int64]bool{}
	for rows.Next() {
		var name string
		kv := &mvccpb.KeyValue{}
		if err := rows.Scan(&name, &kv.Value, &kv.ModRevision, &kv.CreateRevision, &kv.Lease, &kv.Version); err != nil {
			return sum, fmt.Errorf("import: %s: read a key: %w", k.name, err)
		}
		switch {
		case name == kineCompactKey:
			sum.skip(SkippedKineCompactMarker)
			continue
		case name == kineHealthKey:
			sum.skip(SkippedKineHealthKey)
			continue
		case name == kineAPICompactKey:
			name = kineCompactKey
			if kv.Version, kv.Value, err = decodeKineVersion(kv.Value); err != nil {
				return sum, fmt.Errorf("import: %s: %s: %w", k.name, kineAPICompactKey, err)
			}
		}
		kv.Key = []byte(name)
		if kv.Lease != 0 {
			leases[kv.Lease] = true
		}
		if err := sink.Put(kv); err != nil {
			return sum, err
		}
	}
	if err := rows.Err(); err != nil {
		return sum, fmt.Errorf("import: %s: read the keys: %w", k.name, err)
	}
	// kine's lease IDs are their TTLs in seconds (its LeaseGrant answers
	// the TTL as the ID).
	for id := range leases {
		if err := sink.Lease(id, id); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// decodeKineVersion reads kine's "VERSION|VALUE" encoding of
// kube-apiserver's compact key; releases before it stored the version
// alone, and kine answers such a value as "0".
func decodeKineVersion(v []byte) (int64, []byte, error) {
	ver, val, ok := bytes.Cut(v, []byte("|"))
	if !ok {
		ver, val = v, []byte("0")
	}
	n, err := strconv.ParseInt(string(ver), 10, 64)
	if err != nil || n < 1 {
		return 0, nil, fmt.Errorf("value %q: want VERSION|VALUE with a positive version", v)
	}
	return n, val, nil
}
