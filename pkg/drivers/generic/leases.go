package generic

import (
	"context"
	"database/sql"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Leases reads every lease with the milliseconds it has left, on the
// database's clock, with the dialect's statement q, whose columns are id,
// ttl and those milliseconds (mvcc.ReplicaDialect.Leases).
func Leases(ctx context.Context, db *sql.DB, q string) ([]mvcc.LeaseRow, error) {
	rows, err := db.QueryContext(ctx, q)
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
