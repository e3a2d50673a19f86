// Package importer reads the live state of another store that serves the
// etcd API, at one revision, for mvcc.Import: a kine database (SQLite, as
// k3s keeps it in state.db, PostgreSQL, or MySQL and MariaDB) read
// directly from its table, or a running etcd read through the etcd API.
// Sources only read: a kine database is opened read-only, in one read-only
// transaction.
package importer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
	"github.com/quantyroot/quantykube/pkg/tls"
)

// Sink receives a source's state: mvcc.Import is one.
type Sink interface {
	// Put takes the live keys in ascending key order, each once.
	Put(kv *mvccpb.KeyValue) error
	// Lease takes every lease the keys are attached to.
	Lease(id, ttl int64) error
}

// Source is a store to import from.
type Source interface {
	// Read sends the state at one revision to sink and returns that
	// revision and what was left out.
	Read(ctx context.Context, sink Sink) (Summary, error)
	// String names the source for people, without credentials.
	String() string
	Close() error
}

// Summary is what Read found beyond the keys it sent.
type Summary struct {
	// Rev is the source's revision: the imported store's.
	Rev int64
	// Skipped counts the rows or keys left out, by reason.
	Skipped map[string]int64
	// EndedLeases are leases keys were attached to at Rev that had ended
	// by the time they were read (etcd): they are imported with the
	// shortest TTL, so that the keys go soon after the server starts, as
	// they went in the source.
	EndedLeases int64
}

func (s *Summary) skip(reason string) {
	if s.Skipped == nil {
		s.Skipped = map[string]int64{}
	}
	s.Skipped[reason]++
}

// Options are how to reach a source.
type Options struct {
	// TLS is the client certificate and CA for an etcd source (https://, or
	// etcd:// with a certificate or CA), and for a MySQL source unless its
	// endpoint names tls=. A PostgreSQL source takes libpq's parameters in
	// its URL (sslmode, sslrootcert, sslcert, sslkey).
	TLS tls.Config

	// maxRecvMsgSize replaces etcdMaxRecv (tests).
	maxRecvMsgSize int
}

// Open names a source by URL:
//   - sqlite://PATH or a path: a kine SQLite database (k3s's
//     /var/lib/rancher/k3s/server/db/state.db); query parameters are
//     ignored;
//   - postgres://... or postgresql://...: a kine PostgreSQL database;
//   - mysql://...: a kine MySQL or MariaDB database, in either of kine's
//     forms (mysql://user:password@tcp(host:3306)/db or
//     mysql://user:password@host:3306/db);
//   - etcd://HOST:PORT, http://HOST:PORT, https://HOST:PORT: a running
//     etcd (several endpoints separated by commas). etcd:// is https://
//     when TLS files are given, http:// otherwise.
func Open(ctx context.Context, from string, opts Options) (Source, error) {
	scheme, rest, ok := strings.Cut(from, "://")
	switch {
	case from == "":
		return nil, fmt.Errorf("import: no source")
	case !ok:
		return openKineSQLite(ctx, from)
	case scheme == "sqlite":
		path, _, _ := strings.Cut(rest, "?")
		return openKineSQLite(ctx, path)
	case scheme == "postgres", scheme == "postgresql":
		return openKinePostgres(ctx, from)
	case scheme == "mysql":
		return openKineMySQL(ctx, from, opts)
	case scheme == "etcd", scheme == "http", scheme == "https":
		return openEtcd(ctx, from, opts)
	}
	return nil, fmt.Errorf("import: unknown source scheme %q (want sqlite://, postgres://, mysql://, etcd://, http:// or https://)", scheme)
}

// SameDatabase reports whether the source URL from and the QuantyKube
// endpoint target name one database: the same SQLite file, or the same
// PostgreSQL or MySQL host, port and database. (A database reached under two names
// still holds the source's kine table, which the import refuses too.)
func SameDatabase(from, target string) bool {
	fk, fw := locate(from)
	tk, tw := locate(target)
	if fk == "" || fk != tk {
		return false
	}
	if fk == "sqlite" {
		if fs, err := os.Stat(fw); err == nil {
			ts, err := os.Stat(tw)
			return err == nil && os.SameFile(fs, ts)
		}
		fa, err1 := filepath.Abs(fw)
		ta, err2 := filepath.Abs(tw)
		return err1 == nil && err2 == nil && fa == ta
	}
	return fw == tw
}

// locate is the kind of database a URL names ("sqlite", "postgres" or
// "mysql") and
// where it is; "" for anything else.
func locate(u string) (kind, where string) {
	scheme, rest, ok := strings.Cut(u, "://")
	switch {
	case !ok:
		return "sqlite", u
	case scheme == "sqlite":
		path, _, _ := strings.Cut(rest, "?")
		return "sqlite", path
	case scheme == "postgres", scheme == "postgresql":
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			return "", ""
		}
		return "postgres", fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	case scheme == "mysql":
		d, err := mysql.New(u, mysql.Options{})
		if err != nil {
			return "", ""
		}
		return "mysql", d.Where()
	}
	return "", ""
}
