package mvcc

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
)

// LiveKey is one key live at a revision, as the store holds it: its value
// as stored (kube-apiserver's protobuf), never decoded.
type LiveKey struct {
	Key, Value                        []byte
	CreateRev, ModRev, Version, Lease int64
}

// LiveVisitor receives the live state ReadLive reads: first Revision, then
// every live key in ascending byte order, then every lease. Key's slices
// are valid only during the call: a visitor that keeps them copies them.
type LiveVisitor interface {
	// Revision is the revision the state is read at, and the etcd API's
	// floor (the higher of Compact's and retention's) at that revision.
	Revision(rev, floor int64) error
	Key(kv LiveKey) error
	Lease(id, ttl int64) error
}

// livePageRows and livePageBytes bound one page of live keys, as the
// state hash's do: memory holds a page, not the store.
var livePageRows = 1000

const livePageBytes = 8 << 20

// ReadLive reads the store's live state at its latest revision (the
// revision, every live key, every lease) in one read transaction, so
// that what v receives is the state of one revision, whatever a server
// on the store commits meanwhile (quantykube export --etcd-snapshot).
func (r *Reader) ReadLive(ctx context.Context, v LiveVisitor) error {
	tx, err := r.db.BeginTx(ctx, readTxOptions)
	if err != nil {
		return fmt.Errorf("live state: begin a read transaction: %w", err)
	}
	defer tx.Rollback()
	var rev, floor int64
	if err := tx.QueryRowContext(ctx, r.sql.Meta.RevFloor).Scan(&rev, &floor); err != nil {
		return fmt.Errorf("live state: read the revision: %w", err)
	}
	if err := v.Revision(rev, floor); err != nil {
		return err
	}
	if err := readLiveKeys(ctx, tx, r.sql, rev, v); err != nil {
		return fmt.Errorf("live state: the keys at %d: %w", rev, err)
	}
	rows, err := tx.QueryContext(ctx, r.sql.Schema.Leases)
	if err != nil {
		return fmt.Errorf("live state: the leases: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, ttl int64
		if err := rows.Scan(&id, &ttl); err != nil {
			return fmt.Errorf("live state: the leases: %w", err)
		}
		if err := v.Lease(id, ttl); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("live state: the leases: %w", err)
	}
	return nil
}

// readLiveKeys passes every key live at rev, the transaction's own
// revision, to v, a page of live rows at a time (ListSQL.LatestLimit).
func readLiveKeys(ctx context.Context, tx *sql.Tx, st *Statements, rev int64, v LiveVisitor) error {
	kr := KeyRange{Key: []byte{0}, Unbounded: true}
	var last []byte
	limit := int64(livePageRows)
	for {
		args := append(rangeArgs(kr, rev, false), limit)
		rows, err := tx.QueryContext(ctx, st.Range.List.LatestLimit.of(kr), args...)
		if err != nil {
			return err
		}
		n, size := int64(0), 0
		for rows.Next() {
			var kv LiveKey
			var key, value sql.RawBytes
			if err := rows.Scan(&key, &value, &kv.CreateRev, &kv.ModRev, &kv.Version, &kv.Lease); err != nil {
				rows.Close()
				return err
			}
			// The next page starts after the last key: a database that
			// ordered keys otherwise would skip or repeat some.
			if last != nil && bytes.Compare(key, last) <= 0 {
				rows.Close()
				return fmt.Errorf("the database returned key %q after %q: not in byte order", key, last)
			}
			last = append(last[:0], key...)
			kv.Key, kv.Value = key, value
			if kv.Value == nil {
				kv.Value = []byte{}
			}
			if err := v.Key(kv); err != nil {
				rows.Close()
				return err
			}
			n++
			size += len(key) + len(value)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n < limit {
			return nil
		}
		kr = KeyRange{Key: append(bytes.Clone(last), 0), Unbounded: true}
		limit = max(1, min(int64(livePageRows), int64(livePageBytes)/max(1, int64(size)/n)))
	}
}
