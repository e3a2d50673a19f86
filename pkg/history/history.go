// Package history serves quantykube.History: the retained changes of every
// key (Log), a key as it was (Get), and writing an old state back as a new
// revision (Restore). docs/HISTORY.md is its reference.
package history

import (
	"context"
	"errors"

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
	// DefaultRangeLimit is the keys of one page of Get over a range (at
	// most MaxLogLimit).
	DefaultRangeLimit = 500
	// MaxLogBytes ends a page before its entries, values and prev_kvs,
	// pass 3 MiB: an answer fits gRPC's default 4 MiB client limit, and a
	// request holds about its page whatever its limit, since the store
	// reads no value past the page (mvcc.Store.Log, ADR-020).
	MaxLogBytes = 3 << 20
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

// Current is key as it is now (nil if absent), and the store's revision
// it was read at.
func (s *Service) Current(ctx context.Context, key []byte) (*mvccpb.KeyValue, int64, error) {
	res, err := s.store.Range(ctx, &pb.RangeRequest{Key: key})
	if err != nil {
		return nil, 0, err
	}
	if len(res.Kvs) == 1 {
		return res.Kvs[0], res.Rev, nil
	}
	return nil, res.Rev, nil
}

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
	case errors.Is(err, mvcc.ErrNoSpace):
		return status.Error(codes.ResourceExhausted, "quantykube: "+err.Error()+": the NOSPACE alarm is active (etcdctl alarm list, alarm disarm)")
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

// logOnly refuses Log's end bounds and order outside Log.
func logOnly(r *historypb.Request) error {
	if r.EndRevision != 0 || r.EndUnixMs != 0 || r.Descending {
		return invalid("end_revision, end_unix_ms and descending are for Log only")
	}
	return nil
}

// pageLimit is a request's limit: def for 0, at most MaxLogLimit.
func pageLimit(r *historypb.Request, def int) (int, error) {
	switch {
	case r.Limit < 0:
		return 0, invalid("limit must not be negative")
	case r.Limit == 0:
		return def, nil
	}
	return int(min(r.Limit, MaxLogLimit)), nil
}

// Bounds narrows a request to what one caller may read. The zero Bounds
// narrows nothing: the gRPC service's callers hold a client certificate
// for the whole store, as etcd's do.
type Bounds struct {
	// Scope names who asks, and anything beside the request that decides
	// what its pages hold (the aggregated API: the caller's identity and
	// the changes filter): a continue token made under one scope is
	// refused under another (token.go).
	Scope string
	// Keep filters a Log's changes (mvcc.LogQuery.Keep).
	Keep func(key []byte, rev int64) mvcc.Verdict
	// LogFrom is asked where a Log starts (its revision, or its time's;
	// 0: the oldest retained), before anything is read: it returns where
	// the Log may start, from itself or later (the changes before that
	// are left out, as if not retained), or an error that ends the
	// request as it is.
	LogFrom func(from int64) (int64, error)
	// CheckRev is asked of the revision a Get or a Restore reads, once it
	// is resolved (from the request, its time, or its continue token),
	// before anything is answered or written: an error it returns ends the
	// request as it is.
	CheckRev func(rev int64) error
}

func (b Bounds) checkRev(rev int64) error {
	if b.CheckRev == nil {
		return nil
	}
	return b.CheckRev(rev)
}

func (b Bounds) logFrom(from int64) (int64, error) {
	if b.LogFrom == nil {
		return from, nil
	}
	f, err := b.LogFrom(from)
	return max(f, from), err
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

// Get returns the key as it was, or with range_end, a page of the keys of
// the range as they were (getRange).
func (s *Service) Get(ctx context.Context, r *historypb.Request) (*historypb.GetResponse, error) {
	return s.GetWithin(ctx, r, Bounds{})
}

// GetWithin is Get within b.
func (s *Service) GetWithin(ctx context.Context, r *historypb.Request, b Bounds) (*historypb.GetResponse, error) {
	if err := restoreOnly(r); err != nil {
		return nil, err
	}
	if err := logOnly(r); err != nil {
		return nil, err
	}
	if len(r.RangeEnd) != 0 {
		return s.getRange(ctx, r, b)
	}
	if r.Continue != "" {
		return nil, invalid("continue is for Log and for Get of a range")
	}
	if len(r.Key) > 0 && r.UnixMs > 0 && r.Revision == 0 {
		rev, kv, err := s.store.KeyAtTime(ctx, r.Key, r.UnixMs)
		if err != nil {
			return nil, toStatus(err)
		}
		if err := b.checkRev(rev); err != nil {
			return nil, err
		}
		return &historypb.GetResponse{Revision: rev, Kv: kv}, nil
	}
	rev, err := s.readRevision(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := b.checkRev(rev); err != nil {
		return nil, err
	}
	kv, err := s.store.KeyAt(ctx, r.Key, rev)
	if err != nil {
		return nil, toStatus(err)
	}
	return &historypb.GetResponse{Revision: rev, Kv: kv}, nil
}

// Log lists retained changes, oldest first (or newest first), a page at a
// time: at most limit entries and MaxLogBytes.
func (s *Service) Log(ctx context.Context, r *historypb.Request) (*historypb.LogResponse, error) {
	return s.LogWithin(ctx, r, Bounds{})
}

// LogWithin is Log within b: of the changes from b.LogFrom on that b.Keep
// takes (nil: all), asked of each change before its value is read
// (mvcc.LogQuery.Keep). A filtered page reads at most a bounded number of
// changes, so it may hold fewer than limit entries, none even, and still
// have a continue token. The aggregated API lists this way only what its
// caller may list.
func (s *Service) LogWithin(ctx context.Context, r *historypb.Request, b Bounds) (*historypb.LogResponse, error) {
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
	if err := checkEnd(r); err != nil {
		return nil, err
	}
	limit, err := pageLimit(r, DefaultLogLimit)
	if err != nil {
		return nil, err
	}
	bind := binding("log", r, b.Scope)
	after, err := parseLogContinue(r.Continue, r, bind, s.store.Rev())
	if err != nil {
		return nil, err
	}
	keep := b.Keep
	kr := mvcc.NewKeyRange(r.Key, r.RangeEnd)
	from := r.Revision
	if r.UnixMs != 0 {
		// Changes from that time on: the first revision committed at or
		// after it. None yet is an empty page, not an error.
		rev, ok, err := s.store.FirstRevisionFrom(ctx, kr, r.UnixMs, keep != nil)
		if err != nil {
			return nil, toStatus(err)
		}
		if !ok {
			return &historypb.LogResponse{HeaderRevision: s.store.Rev()}, nil
		}
		from = rev
	}
	raised, err := b.logFrom(from)
	if err != nil {
		return nil, err
	}
	if raised != from {
		if raised > s.store.Rev() {
			// The bounds leave nothing to list: an empty page, as a
			// window with no change is.
			return &historypb.LogResponse{HeaderRevision: s.store.Rev()}, nil
		}
		from = raised
	}
	to := r.EndRevision
	if r.EndUnixMs != 0 {
		// Changes before that time: up to the last revision committed
		// before it. None is an empty page.
		rev, err := s.store.RevisionBefore(ctx, kr, r.EndUnixMs, keep != nil)
		if err != nil {
			return nil, toStatus(err)
		}
		if rev == 0 || rev < from {
			return &historypb.LogResponse{HeaderRevision: s.store.Rev()}, nil
		}
		to = rev
	}
	page, err := s.store.Log(ctx, mvcc.LogQuery{Range: kr, FromRev: from, ToRev: to, Descending: r.Descending, After: after, Keep: keep, Limit: limit, MaxBytes: MaxLogBytes})
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
		resp.Continue = formatLogContinue(page.Next, r.Descending, bind)
	}
	return resp, nil
}

// checkEnd refuses negative end bounds, both of them, and an end before
// the start given in the same terms (a time in the future is fine: it
// means now).
func checkEnd(r *historypb.Request) error {
	switch {
	case r.EndRevision < 0 || r.EndUnixMs < 0:
		return invalid("end_revision and end_unix_ms must not be negative")
	case r.EndRevision != 0 && r.EndUnixMs != 0:
		return invalid("give end_revision or end_unix_ms, not both")
	case r.EndRevision != 0 && r.EndRevision < r.Revision:
		return invalid("end_revision %d is before revision %d: the window ends before it starts", r.EndRevision, r.Revision)
	case r.EndUnixMs != 0 && r.EndUnixMs <= r.UnixMs:
		return invalid("end_unix_ms %d is not after unix_ms %d: the window ends before it starts (the end is exclusive)", r.EndUnixMs, r.UnixMs)
	}
	return nil
}

// getRange is Get over [key, range_end): the keys that existed at the
// revision (or time), as they were then, by key, a page at a time. Its
// continue token carries the revision read, so that every page of one
// listing reads the same revision whatever the request says of it.
func (s *Service) getRange(ctx context.Context, r *historypb.Request, b Bounds) (*historypb.GetResponse, error) {
	if len(r.Key) == 0 {
		return nil, invalid("key is required")
	}
	if err := checkWhen(r); err != nil {
		return nil, err
	}
	limit, err := pageLimit(r, DefaultRangeLimit)
	if err != nil {
		return nil, err
	}
	bind := binding("get", r, b.Scope)
	var rev int64
	var after []byte
	if r.Continue != "" {
		if rev, after, err = parseRangeContinue(r.Continue, r, bind, s.store.Rev()); err != nil {
			return nil, err
		}
		if r.Revision != 0 && r.Revision != rev {
			return nil, invalid("continue token %q is of revision %d, not %d", r.Continue, rev, r.Revision)
		}
	} else if rev, err = s.readRevision(ctx, r); err != nil {
		return nil, toStatus(err)
	}
	if err := b.checkRev(rev); err != nil {
		return nil, err
	}
	page, err := s.store.RangeAt(ctx, mvcc.RangeAtQuery{Range: mvcc.NewKeyRange(r.Key, r.RangeEnd), Rev: rev, After: after, Limit: limit, MaxBytes: MaxLogBytes})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &historypb.GetResponse{Revision: rev, Kvs: page.Kvs}
	if page.More {
		resp.Continue = formatRangeContinue(rev, page.Next, bind)
	}
	return resp, nil
}
