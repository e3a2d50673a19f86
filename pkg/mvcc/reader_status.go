package mvcc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// StoreStatus is what a store's database holds, read without a server
// (Reader.Status).
type StoreStatus struct {
	Dialect string `json:"dialect"`
	Schema  int64  `json:"schema"`
	// Rev is the revision; Compact Compact's floor, RetainFloor the
	// highest retention floor, Floor the etcd API's (the higher of the
	// two), Reset the revision a bump moved the store past (ADR-027, 0:
	// none), Imported the revision an import filled it at (0: none).
	Rev         int64 `json:"revision"`
	Compact     int64 `json:"compact"`
	RetainFloor int64 `json:"retainFloor"`
	Floor       int64 `json:"floor"`
	Reset       int64 `json:"reset,omitempty"`
	Imported    int64 `json:"importedRevision,omitempty"`
	// LastCommit is the last batch's commit time (zero before one).
	LastCommit time.Time `json:"lastCommit"`
	// LiveKeys and LiveBytes are the keys live at HashRev and their keys'
	// and values' bytes; Hash the state hash at HashRev (hash.go), Rev or
	// a revision committed since meta was read.
	LiveKeys  int64  `json:"liveKeys"`
	LiveBytes int64  `json:"liveBytes"`
	Hash      string `json:"hash"`
	HashRev   int64  `json:"hashRevision"`
	// LogRows and LogBytes are the log's rows (every retained change,
	// the live keys' own rows included) and their keys' and values' bytes.
	LogRows  int64 `json:"logRows"`
	LogBytes int64 `json:"logBytes"`
	Leases   int64 `json:"leases"`
	// DBBytes and DBBytesInUse are the database's size and the part of it
	// in use, as Status's dbSize and dbSizeInUse report them.
	DBBytes      int64 `json:"dbSize"`
	DBBytesInUse int64 `json:"dbSizeInUse"`
	// Servers are the servers that announce themselves in meta, with the
	// expiry of their row on the database's clock: MySQL's renew it every
	// 10 s, PostgreSQL's write it at start and renew it only while no
	// LISTEN session holds the serve lock for them. Each also records
	// the revision it has applied, when it moved (Announce).
	Servers []AnnouncedServer `json:"servers"`
}

// AnnouncedServer is a server's rows in meta: server/<id> (its expiry),
// server/<id>/rev and server/<id>/at (the revision it has applied, and
// when it recorded it).
type AnnouncedServer struct {
	ID      string    `json:"id"`
	Expires time.Time `json:"expires,omitzero"`
	// Applied is the revision the server's etcd API answered at when it
	// last recorded it, at AppliedAt on the database's clock; Lag is the
	// store's revision less Applied; Age how long ago the record was
	// made, on the clock of the status command. A replica records only
	// when its revision moves: an old record with Lag 0 is a replica at
	// rest, an old one with Lag above 0 one stopped or stuck.
	Applied    int64     `json:"appliedRevision"`
	AppliedAt  time.Time `json:"appliedAt,omitzero"`
	Revision   int64     `json:"revision"`
	Lag        int64     `json:"lag"`
	AgeSeconds float64   `json:"ageSeconds"`
	// Recorded says whether the server has recorded its revision yet.
	Recorded bool `json:"recorded"`
}

// serverRows gathers the server/ rows of meta by server.
type serverRows map[string]*AnnouncedServer

func (m serverRows) add(name string, v int64) {
	rest, ok := strings.CutPrefix(name, "server/")
	if !ok {
		return
	}
	id, field, _ := strings.Cut(rest, "/")
	s := m[id]
	if s == nil {
		s = &AnnouncedServer{ID: id}
		m[id] = s
	}
	switch field {
	case "":
		s.Expires = time.UnixMilli(v).UTC()
	case "rev":
		s.Applied, s.Recorded = v, true
	case "at":
		s.AppliedAt = time.UnixMilli(v).UTC()
	}
}

// list sorts the servers by id and sets each one's lag behind rev and
// its record's age at now.
func (m serverRows) list(rev int64, now time.Time) []AnnouncedServer {
	var out []AnnouncedServer
	for _, s := range m {
		s.Revision = rev
		if s.Recorded {
			s.Lag = rev - s.Applied
			if !s.AppliedAt.IsZero() {
				s.AgeSeconds = now.Sub(s.AppliedAt).Seconds()
			}
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Status reads the store's meta, sizes and live state: one pass over the
// live keys (the state hash's) and one over the log's sizes.
func (r *Reader) Status(ctx context.Context) (*StoreStatus, error) {
	st := &StoreStatus{Dialect: r.d.Name(), Schema: r.Schema}
	rows, err := r.db.QueryContext(ctx, r.sql.Schema.State)
	if err != nil {
		return nil, fmt.Errorf("status: read meta: %w", err)
	}
	servers := serverRows{}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("status: read meta: %w", err)
		}
		switch name {
		case "rev":
			st.Rev = v
		case "compact":
			st.Compact = v
		case "retain_floor":
			st.RetainFloor = v
		case "reset":
			st.Reset = v
		case "imported_rev":
			st.Imported = v
		case "last_unix_ms":
			if v > 0 {
				st.LastCommit = time.UnixMilli(v).UTC()
			}
		}
		servers.add(name, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("status: read meta: %w", err)
	}
	st.Servers = servers.list(st.Rev, time.Now())
	st.Floor = max(st.Compact, st.RetainFloor)
	var imported int64
	if err := r.db.QueryRowContext(ctx, r.sql.Import.Size).Scan(new(int64), new(int64), &st.Leases, &imported); err != nil {
		return nil, fmt.Errorf("status: count the leases: %w", err)
	}
	h, err := r.Hash(ctx, HashQuery{})
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	st.LiveKeys, st.LiveBytes, st.Hash, st.HashRev = h.Keys, h.Bytes, h.Hex(), h.Rev
	if err := r.logSizes(ctx, st); err != nil {
		return nil, fmt.Errorf("status: the log's sizes: %w", err)
	}
	if st.DBBytes, st.DBBytesInUse, err = r.d.Size(ctx, r.db); err != nil {
		return nil, fmt.Errorf("status: the database's size: %w", err)
	}
	return st, nil
}

// logSizes sums what each key's history weighs (history top's pass).
func (r *Reader) logSizes(ctx context.Context, st *StoreStatus) error {
	rows, err := r.db.QueryContext(ctx, r.sql.Usage.Usage, time.Now().UnixMilli())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key []byte
		var n, size, since, oldest, newest int64
		if err := rows.Scan(&key, &n, &size, &since, &oldest, &newest); err != nil {
			return err
		}
		st.LogRows += n
		st.LogBytes += size
	}
	return rows.Err()
}
