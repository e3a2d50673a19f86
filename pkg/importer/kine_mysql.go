package importer

import (
	"context"
	"fmt"

	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
)

// openKineMySQL opens a kine database on MySQL or MariaDB, read-only.
func openKineMySQL(ctx context.Context, dsn string, opts Options) (Source, error) {
	db, where, err := mysql.OpenSource(ctx, dsn, opts.TLS)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	k := &kineSource{db: db, name: "kine (mysql " + where + ")", mysql: true}
	return k, k.check(ctx)
}

// kineLiveMySQL is kineLiveSQL for kine's MySQL table, whose name column
// is ASCII with a case-insensitive collation: names are grouped, matched
// and ordered as bytes (CAST AS BINARY), since keys that differ only in case are
// different keys; the plain equality beside the binary one lets the
// count use kine's (name, id) index.
const kineLiveMySQL = `SELECT k.name, k.value, k.id, k.created_rev, k.lease,
	(SELECT COUNT(*) FROM kine v WHERE v.name = k.name AND CAST(v.name AS BINARY) = CAST(k.name AS BINARY) AND v.id >= k.created_rev AND v.id <= k.id)
FROM (SELECT l.id, l.name, l.value, l.lease, l.deleted,
		CASE WHEN l.created <> 0 THEN l.id ELSE COALESCE(NULLIF(l.create_revision, 0), l.id) END AS created_rev
	FROM kine l JOIN (SELECT MAX(id) AS id FROM kine GROUP BY CAST(name AS BINARY)) m ON m.id = l.id) AS k
WHERE k.deleted = 0
ORDER BY CAST(CASE WHEN k.name = '` + kineAPICompactKey + `' THEN '` + kineCompactKey + `' ELSE k.name END AS BINARY)`
