package mvcc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// quotaRefresh is how often a store with a quota measures its database
// while it admits writes, and how old a replica's copy of the alarms may
// be when a write or an alarm list needs it. A store at rest sends its
// database nothing for either (ADR-007).
const quotaRefresh = time.Second

// quotaState is the space quota (ADR-049): the database size the quota
// compares, measured every quotaRefresh and before any refusal, plus the
// estimated costs of the requests accepted since; and the alarms, a copy
// of meta's alarm rows.
type quotaState struct {
	size, grown atomic.Int64
	measured    atomic.Int64 // how many measures have ended
	measureMu   sync.Mutex   // one measure at a time

	alarmMu    sync.Mutex // held across an alarm's write and its copy here
	alarms     map[string]*pb.AlarmMember
	nospace    atomic.Bool
	alarmsRead atomic.Int64 // when the copy was read, Unix nanoseconds
}

// alarmPrefix starts meta's alarm rows: alarm/TYPE/MEMBER, valued with
// the Unix milliseconds at which it was raised.
const alarmPrefix = "alarm/"

func alarmRow(member uint64, t pb.AlarmType) string {
	return alarmPrefix + strconv.Itoa(int(t)) + "/" + strconv.FormatUint(member, 10)
}

func parseAlarmRow(name string) (*pb.AlarmMember, error) {
	t, m, ok := strings.Cut(strings.TrimPrefix(name, alarmPrefix), "/")
	ti, err1 := strconv.Atoi(t)
	mi, err2 := strconv.ParseUint(m, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("meta row %q: not an alarm/TYPE/MEMBER row", name)
	}
	return &pb.AlarmMember{MemberID: mi, Alarm: pb.AlarmType(ti)}, nil
}

// QuotaBytes is the space quota (0: none).
func (s *Store) QuotaBytes() int64 { return s.opts.QuotaBytes }

// QuotaSize is the database size the quota compares, as last measured
// (0 without a quota): Status's dbSize.
func (s *Store) QuotaSize() int64 { return s.quota.size.Load() }

// NoSpace is 1 while a NOSPACE alarm is active, else 0 (a gauge).
func (s *Store) NoSpace() int64 {
	if s.quota.nospace.Load() {
		return 1
	}
	return 0
}

// CheckQuota admits a request that grows the store by an estimated cost
// (pkg/server's, etcd's estimates): while a NOSPACE alarm is active it is
// ErrNoSpace, as etcd's capped applier; with a quota, when the measured
// size plus the costs admitted since plus cost reaches the quota, the
// size is measured again, and if that still reaches it the NOSPACE alarm
// is raised (and persisted) and the request refused. A cost of 0 (a read,
// a delete) always passes.
func (s *Store) CheckQuota(ctx context.Context, cost int64) error {
	if cost <= 0 {
		return nil
	}
	s.freshAlarms(ctx)
	if s.quota.nospace.Load() {
		return ErrNoSpace
	}
	q := s.opts.QuotaBytes
	if q <= 0 {
		return nil
	}
	if s.quota.size.Load()+s.quota.grown.Load()+cost < q {
		s.quota.grown.Add(cost)
		return nil
	}
	size, err := s.measure(ctx)
	if err != nil {
		return fmt.Errorf("measuring the database for the quota: %w", err)
	}
	if size+cost < q {
		s.quota.grown.Add(cost)
		return nil
	}
	if _, err := s.ActivateAlarm(ctx, s.memberID, pb.AlarmType_NOSPACE); err != nil {
		return err
	}
	s.log.Warn("database space exceeded: NOSPACE alarm raised; writes that grow the store are refused until `etcdctl alarm disarm`",
		"db_size_bytes", size, "quota_backend_bytes", q)
	return ErrNoSpace
}

// measure reads the database's size; callers that waited for another's
// measure take its result.
func (s *Store) measure(ctx context.Context) (int64, error) {
	gen := s.quota.measured.Load()
	s.quota.measureMu.Lock()
	defer s.quota.measureMu.Unlock()
	if s.quota.measured.Load() != gen {
		return s.quota.size.Load(), nil
	}
	total, _, err := s.d.Size(ctx, s.rdb)
	if err != nil {
		return 0, err
	}
	s.quota.size.Store(total)
	s.quota.grown.Store(0)
	s.quota.measured.Add(1)
	return total, nil
}

// Alarms lists the active alarms of type t (NONE: every one), as etcd's
// AlarmRequest GET.
func (s *Store) Alarms(ctx context.Context, t pb.AlarmType) []*pb.AlarmMember {
	s.freshAlarms(ctx)
	s.quota.alarmMu.Lock()
	defer s.quota.alarmMu.Unlock()
	var out []*pb.AlarmMember
	for _, a := range s.quota.alarms {
		if t == pb.AlarmType_NONE || a.Alarm == t {
			out = append(out, &pb.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm})
		}
	}
	return out
}

// ActivateAlarm raises an alarm in the database, where every replica and
// every restart sees it; it returns the alarm, the one already active
// included, as etcd does.
func (s *Store) ActivateAlarm(ctx context.Context, member uint64, t pb.AlarmType) (*pb.AlarmMember, error) {
	s.quota.alarmMu.Lock()
	defer s.quota.alarmMu.Unlock()
	name := alarmRow(member, t)
	if _, err := s.wdb.ExecContext(ctx, s.sql.Alarm.Activate, name, s.opts.Now().UnixMilli()); err != nil {
		return nil, fmt.Errorf("raising the %s alarm: %w", t, err)
	}
	s.quota.alarms[name] = &pb.AlarmMember{MemberID: member, Alarm: t}
	s.alarmsChanged()
	return &pb.AlarmMember{MemberID: member, Alarm: t}, nil
}

// DeactivateAlarm clears an alarm; nil when it was not active.
func (s *Store) DeactivateAlarm(ctx context.Context, member uint64, t pb.AlarmType) (*pb.AlarmMember, error) {
	s.quota.alarmMu.Lock()
	defer s.quota.alarmMu.Unlock()
	name := alarmRow(member, t)
	res, err := s.wdb.ExecContext(ctx, s.sql.Alarm.Deactivate, name)
	if err != nil {
		return nil, fmt.Errorf("clearing the %s alarm: %w", t, err)
	}
	_, had := s.quota.alarms[name]
	delete(s.quota.alarms, name)
	s.alarmsChanged()
	if n, err := res.RowsAffected(); err == nil && n == 0 && !had {
		return nil, nil
	}
	return &pb.AlarmMember{MemberID: member, Alarm: t}, nil
}

// alarmsChanged sets nospace from the alarms; alarmMu is held.
func (s *Store) alarmsChanged() {
	nospace := false
	for _, a := range s.quota.alarms {
		nospace = nospace || a.Alarm == pb.AlarmType_NOSPACE
	}
	s.quota.nospace.Store(nospace)
}

// freshAlarms reads the alarms again on a replica whose copy is older
// than quotaRefresh: others may have raised or cleared one. A failed read
// keeps the copy (logged): the write or the list goes on with it.
func (s *Store) freshAlarms(ctx context.Context) {
	if s.replica == nil || time.Since(time.Unix(0, s.quota.alarmsRead.Load())) < quotaRefresh {
		return
	}
	if err := s.loadAlarms(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("reading the alarms", "err", err)
	}
}

// loadAlarms reads meta's alarm rows into memory.
func (s *Store) loadAlarms(ctx context.Context) error {
	s.quota.alarmMu.Lock()
	defer s.quota.alarmMu.Unlock()
	rows, err := s.rdb.QueryContext(ctx, s.sql.Alarm.List)
	if err != nil {
		return fmt.Errorf("reading the alarms: %w", err)
	}
	defer rows.Close()
	alarms := map[string]*pb.AlarmMember{}
	for rows.Next() {
		var name string
		var ms int64
		if err := rows.Scan(&name, &ms); err != nil {
			return fmt.Errorf("reading the alarms: %w", err)
		}
		a, err := parseAlarmRow(name)
		if err != nil {
			return fmt.Errorf("reading the alarms: %w", err)
		}
		alarms[name] = a
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the alarms: %w", err)
	}
	s.quota.alarms = alarms
	s.alarmsChanged()
	s.quota.alarmsRead.Store(time.Now().UnixNano())
	return nil
}

// quotaLoop measures the database every quotaRefresh while there is a
// quota and writes were admitted since the last measure.
func (s *Store) quotaLoop() {
	if s.opts.QuotaBytes <= 0 {
		return
	}
	s.every(quotaRefresh, func(ctx context.Context) {
		if s.quota.grown.Load() == 0 {
			return
		}
		if _, err := s.measure(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("measuring the database for the quota", "err", err)
		}
	})
}
