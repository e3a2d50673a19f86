package mvcc

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"sort"
	"sync"
	"time"
)

// Leases. Only (id, ttl) is persisted on SQLite, and deadlines live in
// this process: after a restart every lease gets its full TTL again, as
// etcd gives after a leader change. On a shared database the deadlines
// live in the database, on its clock (renewed_ms): every replica mirrors
// them (tail.go), a restart keeps what was left, and renewal and expiry
// are decided there.
//
// Grant and revoke are writes (the leases table changes inside a write
// batch). Expiry is a write too: one revision that deletes every attached
// key, with DELETE events carrying prev_kv.

// MinLeaseTTL is etcd's floor for a lease's TTL with default timings.
const MinLeaseTTL = 2

// MaxLeaseTTL is etcd's ceiling (9,000,000,000 s).
const MaxLeaseTTL = 9_000_000_000

// LeaseGrant asks for a lease: ID 0 lets the store choose one.
type LeaseGrant struct {
	ID  int64
	TTL int64
}

// Lease is a granted lease and the store's revision at the grant.
type Lease struct {
	ID, TTL, Rev int64
}

// LeaseInfo is what TimeToLive reports.
type LeaseInfo struct {
	ID         int64
	GrantedTTL int64
	TTL        int64 // remaining seconds
	Keys       [][]byte
}

// lessor is the in-memory table of live leases and their deadlines, and the
// only holder of its lock.
type lessor struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[int64]*leaseState
	// renewReplica, when set, renews in the database (a shared database),
	// and the table follows it.
	renewReplica func(ctx context.Context, id int64) (ttl int64, ok bool, err error)
}

type leaseState struct {
	ttl      int64
	deadline time.Time
}

func newLessor(now func() time.Time) *lessor {
	return &lessor{now: now, m: map[int64]*leaseState{}}
}

// add gives a lease its full TTL from now.
func (l *lessor) add(id, ttl int64) { l.set(id, ttl, time.Duration(ttl)*time.Second) }

// set gives a lease the deadline remaining from now (adding it if needed).
func (l *lessor) set(id, ttl int64, remaining time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[id] = &leaseState{ttl: ttl, deadline: l.now().Add(remaining)}
}

func (l *lessor) remove(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

// replace makes the table exactly rows (shared databases: the database is
// the authority on leases and their deadlines).
func (l *lessor) replace(rows []LeaseRow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	m := make(map[int64]*leaseState, len(rows))
	for _, r := range rows {
		m[r.ID] = &leaseState{ttl: r.TTL, deadline: now.Add(time.Duration(r.RemainingMs) * time.Millisecond)}
	}
	l.m = m
}

func (l *lessor) isExpired(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[id]
	return ok && !l.now().Before(s.deadline)
}

// expired lists the leases whose deadline has passed.
func (l *lessor) expired() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var ids []int64
	for id, s := range l.m {
		if !now.Before(s.deadline) {
			ids = append(ids, id)
		}
	}
	return ids
}

// renew restarts a live lease's TTL; ok is false for an unknown or expired one.
func (l *lessor) renew(ctx context.Context, id int64) (ttl int64, ok bool, err error) {
	if l.renewReplica != nil {
		ttl, ok, err := l.renewReplica(ctx, id)
		if ok {
			l.add(id, ttl)
		}
		return ttl, ok, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, found := l.m[id]
	now := l.now()
	if !found || !now.Before(s.deadline) {
		return 0, false, nil
	}
	s.deadline = now.Add(time.Duration(s.ttl) * time.Second)
	return s.ttl, true, nil
}

func (l *lessor) info(id int64) (LeaseInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[id]
	if !ok {
		return LeaseInfo{}, false
	}
	remaining := s.deadline.Sub(l.now())
	return LeaseInfo{ID: id, GrantedTTL: s.ttl, TTL: max(0, int64(math.Ceil(remaining.Seconds())))}, true
}

func (l *lessor) ids() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]int64, 0, len(l.m))
	for id := range l.m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (l *lessor) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// Grant creates a lease (Lessor).
func (s *Store) Grant(ctx context.Context, g LeaseGrant) (Lease, error) {
	res := s.submit(ctx, &writeReq{kind: wLeaseGrant, lease: g})
	res.lease.Rev = res.rev
	return res.lease, res.err
}

// Revoke deletes the lease and every key attached to it (Lessor).
func (s *Store) Revoke(ctx context.Context, id int64) (int64, error) {
	res := s.submit(ctx, &writeReq{kind: wLeaseRevoke, lease: LeaseGrant{ID: id}})
	return res.rev, res.err
}

// Renew extends a lease by its TTL (Lessor).
func (s *Store) Renew(ctx context.Context, id int64) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	ttl, ok, err := s.leases.renew(ctx, id)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, ErrLeaseNotFound
	}
	return ttl, nil
}

// TimeToLive reports a lease; its keys are read only when asked for (Lessor).
func (s *Store) TimeToLive(ctx context.Context, id int64, keys bool) (*LeaseInfo, error) {
	info, ok := s.leases.info(id)
	if !ok {
		return nil, ErrLeaseNotFound
	}
	if keys {
		rows, err := s.readRows(ctx, s.sql.Lease.Keys, id)
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

// Leases lists every live lease ID (Lessor).
func (s *Store) Leases() []int64 { return s.leases.ids() }

// LeaseCount is the number of live leases.
func (s *Store) LeaseCount() int { return s.leases.count() }

// expireLeases submits an expiry for every lease past its deadline; the
// writer checks the deadline again inside its batch.
func (s *Store) expireLeases() {
	s.every(s.opts.LeaseCheckInterval, func(ctx context.Context) {
		for _, id := range s.leases.expired() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			res := s.submit(ctx, &writeReq{kind: wLeaseExpire, lease: LeaseGrant{ID: id}})
			cancel()
			if res.err != nil && !errors.Is(res.err, ErrLeaseNotFound) && !errors.Is(res.err, ErrClosed) && !errors.Is(res.err, context.Canceled) {
				s.log.Warn("lease expiry failed; will retry", "lease", id, "err", res.err)
			}
		}
	})
}

// leaseExists reports whether a lease exists as the batch sees it.
func (b *batch) leaseExists(id int64) (bool, error) {
	if _, ok := b.granted[id]; ok {
		return true, nil
	}
	if b.revoked[id] {
		return false, nil
	}
	var one int
	err := b.tx.q().QueryRowContext(b.ctx, b.s.sql.Lease.Exists, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (b *batch) grant(g LeaseGrant) (Lease, error) {
	if g.TTL > MaxLeaseTTL {
		return Lease{}, ErrLeaseTTLTooBig
	}
	id, ttl := g.ID, max(g.TTL, MinLeaseTTL)
	if id == 0 {
		for {
			id = randomID()
			ok, err := b.leaseExists(id)
			if err != nil {
				return Lease{}, err
			}
			if id != 0 && !ok {
				break
			}
		}
	} else if ok, err := b.leaseExists(id); err != nil {
		return Lease{}, err
	} else if ok {
		return Lease{}, ErrLeaseExists
	}
	if _, err := b.tx.q().ExecContext(b.ctx, b.s.sql.Lease.Insert, id, ttl); err != nil {
		return Lease{}, err
	}
	b.granted[id] = ttl
	delete(b.revoked, id)
	return Lease{ID: id, TTL: ttl}, nil
}

// revoke deletes every key attached to the lease in one revision.
func (b *batch) revoke(id int64) error {
	ok, err := b.leaseExists(id)
	if err != nil {
		return err
	}
	if !ok {
		return ErrLeaseNotFound
	}
	attached, err := b.tx.scan(KeyRange{}, id)
	if err != nil {
		return err
	}
	c := &change{rev: b.rev + 1}
	if err := b.deleteKeys(c, attached); err != nil {
		return err
	}
	if c.touched() {
		b.rev = c.rev
	}
	if _, err := b.tx.q().ExecContext(b.ctx, b.s.sql.Lease.Delete, id); err != nil {
		return err
	}
	delete(b.granted, id)
	b.revoked[id] = true
	return nil
}

// expire revokes a lease whose deadline has passed, unless it was renewed
// (or revoked, or expired by another replica) while the expiry was queued.
func (b *batch) expire(id int64) error {
	expired, err := b.tx.leaseExpired(id)
	if err != nil || !expired {
		return err
	}
	return b.revoke(id)
}
