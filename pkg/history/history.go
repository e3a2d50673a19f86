// Package history serves quantykube.History: the retained changes of every
// key (Log), a key as it was (Get), and writing an old state back as a new
// revision (Restore). docs/HISTORY.md is its reference.
package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	// DefaultLogLimit and MaxLogLimit bound the entries of one Log page.
	DefaultLogLimit = 1000
	MaxLogLimit     = 10000
	// MaxLogBytes ends a page before its entries, values and prev_kvs,
	// pass 3 MiB: an answer fits gRPC's default 4 MiB client limit, and a
	// request holds about its page whatever its limit, since the store
	// reads no value past the page (mvcc.Store.Log, ADR-020).
	MaxLogBytes = 3 << 20
	// restoreAttempts bounds retries when the key changes under a Restore.
	restoreAttempts = 5
)

// Store is what the service reads and writes: the retained history, and
// the etcd key-value store that Restore writes through.
type Store interface {
	mvcc.KV
	mvcc.History
}

// Service implements historypb.HistoryServer on a store.
type Service struct {
	historypb.UnimplementedHistoryServer
	store Store
}

// New returns the History service for store.
func New(store Store) *Service { return &Service{store: store} }

// Register adds the service to g.
func (s *Service) Register(g *grpc.Server) { historypb.RegisterHistoryServer(g, s) }

func toStatus(err error) error {
	var oor *mvcc.OutOfRangeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &oor):
		return status.Error(codes.OutOfRange, "quantykube: "+oor.Msg)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, mvcc.ErrClosed):
		return status.Error(codes.Unavailable, "quantykube: server stopping")
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unavailable, "quantykube: database: %v", err)
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "quantykube: "+format, args...)
}

// checkWhen refuses a request's revision and unix_ms unless it gives at
// most one of them, and that one not negative.
func checkWhen(r *historypb.Request) error {
	switch {
	case r.Revision != 0 && r.UnixMs != 0:
		return invalid("give revision or unix_ms, not both")
	case r.Revision < 0 || r.UnixMs < 0:
		return invalid("revision and unix_ms must not be negative")
	}
	return nil
}

// restoreOnly refuses if_mod_revision outside Restore.
func restoreOnly(r *historypb.Request) error {
	if r.IfModRevision != nil {
		return invalid("if_mod_revision is for Restore only")
	}
	return nil
}

// readRevision resolves a request's revision or unix_ms (or neither: now).
func (s *Service) readRevision(ctx context.Context, r *historypb.Request) (int64, error) {
	if len(r.Key) == 0 {
		return 0, invalid("key is required")
	}
	if err := checkWhen(r); err != nil {
		return 0, err
	}
	switch {
	case r.UnixMs != 0:
		return s.store.RevisionAt(ctx, r.Key, r.UnixMs)
	case r.Revision != 0:
		return r.Revision, nil
	}
	return s.store.Rev(), nil
}

// Get returns the key as it was.
func (s *Service) Get(ctx context.Context, r *historypb.Request) (*historypb.GetResponse, error) {
	if len(r.RangeEnd) != 0 {
		return nil, invalid("range_end is for Log only")
	}
	if err := restoreOnly(r); err != nil {
		return nil, err
	}
	if len(r.Key) > 0 && r.UnixMs > 0 && r.Revision == 0 {
		rev, kv, err := s.store.KeyAtTime(ctx, r.Key, r.UnixMs)
		if err != nil {
			return nil, toStatus(err)
		}
		return &historypb.GetResponse{Revision: rev, Kv: kv}, nil
	}
	rev, err := s.readRevision(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	kv, err := s.store.KeyAt(ctx, r.Key, rev)
	if err != nil {
		return nil, toStatus(err)
	}
	return &historypb.GetResponse{Revision: rev, Kv: kv}, nil
}

// Log lists retained changes, oldest first, a page at a time: at most
// limit entries and MaxLogBytes.
func (s *Service) Log(ctx context.Context, r *historypb.Request) (*historypb.LogResponse, error) {
	// The whole request is checked before the store is asked anything.
	if len(r.Key) == 0 {
		return nil, invalid("key is required")
	}
	if err := checkWhen(r); err != nil {
		return nil, err
	}
	if err := restoreOnly(r); err != nil {
		return nil, err
	}
	var limit int
	switch {
	case r.Limit < 0:
		return nil, invalid("limit must not be negative")
	case r.Limit == 0:
		limit = DefaultLogLimit
	default:
		limit = int(min(r.Limit, MaxLogLimit))
	}
	after, err := parseContinue(r.Continue)
	if err != nil {
		return nil, err
	}
	kr := mvcc.NewKeyRange(r.Key, r.RangeEnd)
	from := r.Revision
	if r.UnixMs != 0 {
		// Changes from that time on: the first revision committed at or
		// after it. None yet is an empty page, not an error.
		rev, ok, err := s.store.FirstRevisionFrom(ctx, kr, r.UnixMs)
		if err != nil {
			return nil, toStatus(err)
		}
		if !ok {
			return &historypb.LogResponse{HeaderRevision: s.store.Rev()}, nil
		}
		from = rev
	}
	page, err := s.store.Log(ctx, mvcc.LogQuery{Range: kr, FromRev: from, After: after, Limit: limit, MaxBytes: MaxLogBytes})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &historypb.LogResponse{HeaderRevision: page.HeaderRev, Entries: make([]*historypb.LogEntry, len(page.Events))}
	for i, e := range page.Events {
		ent := &historypb.LogEntry{Revision: e.Rev(), UnixMs: e.UnixMs, Kv: e.Kv, PrevKv: e.PrevKv}
		if e.Type == mvccpb.DELETE {
			ent.Deleted = 1
		}
		resp.Entries[i] = ent
	}
	if page.More {
		resp.Continue = formatContinue(page.Next)
	}
	return resp, nil
}

// A continue token is the last entry a page returned, "REV.SUB": opaque to
// clients, and valid on any replica because it names a change, not a
// position in this server's memory.
func formatContinue(c mvcc.LogCursor) string { return fmt.Sprintf("%d.%d", c.Rev, c.Sub) }

func parseContinue(tok string) (mvcc.LogCursor, error) {
	if tok == "" {
		return mvcc.LogCursor{}, nil
	}
	a, b, ok := strings.Cut(tok, ".")
	rev, err1 := strconv.ParseInt(a, 10, 64)
	sub, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || rev < 1 || sub < 0 {
		return mvcc.LogCursor{}, invalid("continue token %q is not one this server gave", tok)
	}
	return mvcc.LogCursor{Rev: rev, Sub: sub}, nil
}

// Restore writes the key back as it was, through the same write path as
// every etcd write. A key that already has that state is left alone. With
// if_mod_revision, only a key still at that mod_revision is restored (or
// found already as it was).
func (s *Service) Restore(ctx context.Context, r *historypb.Request) (*historypb.RestoreResponse, error) {
	return s.RestoreChecked(ctx, r, nil)
}

// RestoreCheck decides whether a restore may go on, given the key's state
// now (cur, nil if absent) and the state it would write back (old, nil for
// a delete). An error it returns ends the restore and is returned as it is.
type RestoreCheck func(ctx context.Context, cur, old *mvccpb.KeyValue) error

// RestoreChecked is Restore that asks check before every attempt, against
// exactly the state the attempt's conditional write may replace: if the
// key changes in between, the write fails and the next attempt asks again.
// The aggregated API checks the caller's access to the object this way.
func (s *Service) RestoreChecked(ctx context.Context, r *historypb.Request, check RestoreCheck) (*historypb.RestoreResponse, error) {
	if len(r.RangeEnd) != 0 {
		return nil, invalid("range_end is for Log only: Restore writes one key")
	}
	if r.Revision == 0 && r.UnixMs == 0 {
		return nil, invalid("give the revision or unix_ms to restore from")
	}
	if r.GetIfModRevision() < 0 {
		return nil, invalid("if_mod_revision must not be negative")
	}
	rev, err := s.readRevision(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	old, err := s.store.KeyAt(ctx, r.Key, rev)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &historypb.RestoreResponse{Revision: rev}
	if old != nil {
		// Leases are not restored: the key comes back without one.
		resp.Kv = &mvccpb.KeyValue{Key: old.Key, Value: old.Value}
	}
	for range restoreAttempts {
		cur, err := s.store.Range(ctx, &pb.RangeRequest{Key: r.Key})
		if err != nil {
			return nil, toStatus(err)
		}
		var now *mvccpb.KeyValue
		if len(cur.Kvs) == 1 {
			now = cur.Kvs[0]
		}
		if check != nil {
			// Before any answer: even "already as it was" shows the old value.
			if err := check(ctx, now, old); err != nil {
				return nil, err
			}
		}
		if err := unchanged(r, now); err != nil {
			return nil, err
		}
		var curMod int64
		if now != nil {
			curMod = now.ModRevision
			if old != nil && bytes.Equal(now.Value, old.Value) {
				return resp, nil // already as it was
			}
		} else if old == nil {
			return resp, nil // already absent
		}
		op := &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: r.Key}}}
		if old != nil {
			op = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: r.Key, Value: old.Value}}}
		}
		// Only over the state just read: a concurrent writer wins, and the
		// restore looks again (with if_mod_revision, to refuse).
		txn, err := s.store.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: r.Key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: curMod}}},
			Success: []*pb.RequestOp{op},
		})
		if err != nil {
			return nil, toStatus(err)
		}
		if txn.Succeeded {
			resp.NewRevision = txn.Header.Revision
			if resp.Kv != nil {
				// Report the state as written, with its new revision and version.
				got, err := s.store.KeyAt(ctx, r.Key, resp.NewRevision)
				if err != nil {
					return nil, toStatus(err)
				}
				resp.Kv = got
			}
			return resp, nil
		}
	}
	return nil, status.Errorf(codes.Aborted, "quantykube: %q kept changing during the restore; try again", r.Key)
}

// unchanged refuses a restore whose if_mod_revision the key's state now
// (cur, nil if absent) does not have: the caller decided on a state that
// is gone.
func unchanged(r *historypb.Request, cur *mvccpb.KeyValue) error {
	if r.IfModRevision == nil {
		return nil
	}
	want, mod := *r.IfModRevision, int64(0)
	if cur != nil {
		mod = cur.ModRevision
	}
	if mod == want {
		return nil
	}
	state := func(mod int64) string {
		if mod == 0 {
			return "absent"
		}
		return fmt.Sprintf("at mod_revision %d", mod)
	}
	return status.Errorf(codes.Aborted, "quantykube: %q changed since it was read: it is %s, not %s (if_mod_revision %d); nothing was restored",
		r.Key, state(mod), state(want), want)
}
