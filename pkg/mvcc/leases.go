package mvcc

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"
)

// leaseTable keeps lease deadlines in memory. Only (id, ttl) is persisted:
// after a restart every lease gets its full TTL again, as etcd gives after
// a leader change.
type leaseTable struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[int64]*leaseState
}

type leaseState struct {
	ttl      int64
	deadline time.Time
}

func newLeaseTable(now func() time.Time) *leaseTable {
	return &leaseTable{now: now, m: map[int64]*leaseState{}}
}

func (t *leaseTable) add(id, ttl int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[id] = &leaseState{ttl: ttl, deadline: t.now().Add(time.Duration(ttl) * time.Second)}
}

func (t *leaseTable) remove(id int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

func (t *leaseTable) isExpired(id int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.m[id]
	return ok && !t.now().Before(l.deadline)
}

func (t *leaseTable) expired() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var ids []int64
	for id, l := range t.m {
		if !now.Before(l.deadline) {
			ids = append(ids, id)
		}
	}
	return ids
}

// LeaseRenew extends a lease by its TTL; it returns ErrLeaseNotFound for an
// unknown or already expired lease.
func (s *Store) LeaseRenew(id int64) (int64, error) {
	if s.sh != nil {
		return s.renewShared(s.sh, id)
	}
	t := s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.m[id]
	now := t.now()
	if !ok || !now.Before(l.deadline) {
		return 0, ErrLeaseNotFound
	}
	l.deadline = now.Add(time.Duration(l.ttl) * time.Second)
	return l.ttl, nil
}

// LeaseInfo is what TimeToLive reports.
type LeaseInfo struct {
	ID         int64
	GrantedTTL int64
	TTL        int64 // remaining seconds
	Keys       [][]byte
}

// LeaseTimeToLive reports a lease; keys are read only when asked for.
func (s *Store) LeaseTimeToLive(ctx context.Context, id int64, keys bool) (*LeaseInfo, error) {
	t := s.leases
	t.mu.Lock()
	l, ok := t.m[id]
	var info LeaseInfo
	if ok {
		remaining := l.deadline.Sub(t.now())
		info = LeaseInfo{ID: id, GrantedTTL: l.ttl, TTL: max(0, int64(math.Ceil(remaining.Seconds())))}
	}
	t.mu.Unlock()
	if !ok {
		return nil, ErrLeaseNotFound
	}
	if keys {
		rows, err := s.rdb.QueryContext(ctx, s.d.Bind(`SELECT key FROM current WHERE lease = ? ORDER BY key`), id)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var k []byte
			if err := rows.Scan(&k); err != nil {
				return nil, err
			}
			info.Keys = append(info.Keys, k)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return &info, nil
}

// Leases lists every live lease ID.
func (s *Store) Leases() []int64 {
	t := s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]int64, 0, len(t.m))
	for id := range t.m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// set gives a lease the deadline remaining from now (adding it if needed).
func (t *leaseTable) set(id, ttl int64, remaining time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[id] = &leaseState{ttl: ttl, deadline: t.now().Add(remaining)}
}

// replace makes the table exactly rows (shared databases: the database is
// the authority on leases and their deadlines).
func (t *leaseTable) replace(rows []LeaseRow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	m := make(map[int64]*leaseState, len(rows))
	for _, r := range rows {
		m[r.ID] = &leaseState{ttl: r.TTL, deadline: now.Add(time.Duration(r.RemainingMs) * time.Millisecond)}
	}
	t.m = m
}

// LeaseCount is the number of live leases.
func (s *Store) LeaseCount() int {
	t := s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
