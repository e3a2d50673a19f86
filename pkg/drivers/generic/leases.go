package generic

import (
	"context"
	"database/sql"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Leases reads every lease with the milliseconds it has left, on the
// database's clock: nowMs is the dialect's SQL for the time now in Unix
// milliseconds (mvcc.ReplicaDialect.Leases).
func Leases(ctx context.Context, db *sql.DB, nowMs string) ([]mvcc.LeaseRow, error) {
	rows, err := db.QueryContext(ctx, leasesSQL(nowMs))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []mvcc.LeaseRow
	for rows.Next() {
		var r mvcc.LeaseRow
		if err := rows.Scan(&r.ID, &r.TTL, &r.RemainingMs); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// leasesSQL reads every lease's ID, TTL and the milliseconds it has left,
// nowMs being the dialect's clock.
func leasesSQL(nowMs string) string {
	return `SELECT id, ttl, renewed_ms + ttl * 1000 - ` + nowMs + ` FROM leases`
}
