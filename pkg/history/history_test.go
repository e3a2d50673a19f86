package history

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// fakeStore answers from its fields and records every call. The methods
// of mvcc.KV the service does not use panic on the nil embedded KV.
type fakeStore struct {
	mvcc.KV
	rev   int64
	calls []string

	kv    *mvccpb.KeyValue           // KeyAt's and KeyAtTime's answer...
	kvAt  map[int64]*mvccpb.KeyValue // ...or KeyAt's at these revisions
	atRev int64                      // KeyAtTime's and RevisionAt's revision
	err   error                      // every read's error

	first   int64 // FirstRevisionFrom's answer
	firstOK bool
	query   mvcc.LogQuery // the last Log query
	page    *mvcc.LogPage

	rangeQuery mvcc.RangeAtQuery // the last RangeAt query
	rangePage  *mvcc.RangeAtPage

	current *mvccpb.KeyValue // what Range finds
	fails   int              // Txns whose compare fails before one succeeds
	// What a failed Txn's writer left, if it is not current: what Range
	// finds from then on.
	writer *mvccpb.KeyValue
	txns   []*pb.TxnRequest
}

func (f *fakeStore) called(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeStore) Rev() int64 { return f.rev }

func (f *fakeStore) KeyAt(_ context.Context, key []byte, rev int64) (*mvccpb.KeyValue, error) {
	f.called("KeyAt %s %d", key, rev)
	if f.kvAt != nil {
		return f.kvAt[rev], f.err
	}
	return f.kv, f.err
}

func (f *fakeStore) KeyAtTime(_ context.Context, key []byte, unixMs int64) (int64, *mvccpb.KeyValue, error) {
	f.called("KeyAtTime %s %d", key, unixMs)
	return f.atRev, f.kv, f.err
}

func (f *fakeStore) RevisionAt(_ context.Context, key []byte, unixMs int64) (int64, error) {
	f.called("RevisionAt %s %d", key, unixMs)
	return f.atRev, f.err
}

func (f *fakeStore) FirstRevisionFrom(_ context.Context, kr mvcc.KeyRange, unixMs int64, _ bool) (int64, bool, error) {
	f.called("FirstRevisionFrom %s %d", kr.Key, unixMs)
	return f.first, f.firstOK, f.err
}

func (f *fakeStore) Usage(context.Context, int64, func(mvcc.KeyUsage) error) error {
	f.calls = append(f.calls, "Usage")
	return f.err
}

func (f *fakeStore) RevisionBefore(_ context.Context, kr mvcc.KeyRange, unixMs int64, _ bool) (int64, error) {
	f.called("RevisionBefore %s %d", kr.Key, unixMs)
	return f.atRev, f.err
}

func (f *fakeStore) RangeAt(_ context.Context, q mvcc.RangeAtQuery) (*mvcc.RangeAtPage, error) {
	f.called("RangeAt %s %s %d %q %d", q.Range.Key, q.Range.End, q.Rev, q.After, q.Limit)
	f.rangeQuery = q
	if f.rangePage == nil {
		return &mvcc.RangeAtPage{}, f.err
	}
	return f.rangePage, f.err
}

func (f *fakeStore) Log(_ context.Context, q mvcc.LogQuery) (*mvcc.LogPage, error) {
	f.called("Log")
	f.query = q
	if f.page == nil {
		return &mvcc.LogPage{HeaderRev: f.rev}, f.err
	}
	return f.page, f.err
}

func (f *fakeStore) Range(_ context.Context, r *pb.RangeRequest) (*mvcc.RangeResult, error) {
	f.called("Range %s", r.Key)
	res := &mvcc.RangeResult{Rev: f.rev}
	if f.current != nil {
		res.Kvs = []*mvccpb.KeyValue{f.current}
	}
	return res, f.err
}

func (f *fakeStore) Txn(_ context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	f.called("Txn")
	f.txns = append(f.txns, r)
	if f.fails > 0 {
		f.fails--
		if f.writer != nil {
			f.current = f.writer
		}
		return &pb.TxnResponse{Header: &pb.ResponseHeader{Revision: f.rev}}, nil
	}
	f.rev++
	return &pb.TxnResponse{Succeeded: true, Header: &pb.ResponseHeader{Revision: f.rev}}, nil
}

// wantStatus checks err's gRPC code and that its message contains msg.
func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Fatalf("error %v, want %v containing %q", err, code, msg)
	}
}

func TestRequestValidation(t *testing.T) {
	key := []byte("/registry/pods/a")
	for _, tc := range []struct {
		method string
		r      *historypb.Request
		msg    string
	}{
		{"Get", &historypb.Request{}, "key is required"},
		{"Get", &historypb.Request{Revision: 3}, "key is required"},
		{"Get", &historypb.Request{UnixMs: 1000}, "key is required"},
		{"Get", &historypb.Request{Key: key, RangeEnd: []byte("z"), Limit: -1}, "limit must not be negative"},
		{"Get", &historypb.Request{Key: key, RangeEnd: []byte("z"), Continue: "7.3"}, "continue token"},
		{"Get", bound("get", &historypb.Request{Key: key, RangeEnd: []byte("z"), Revision: 6}, "7/L3JlZ2lzdHJ5L3BvZHMvYi94"), "of revision 7, not 6"},
		{"Get", &historypb.Request{Key: key, RangeEnd: []byte("z"), Revision: 6, Continue: "6/L3JlZ2lzdHJ5L3BvZHMvYi94"}, "not one this server gave"},
		{"Get", &historypb.Request{Key: key, RangeEnd: []byte("z"), Revision: 6, Continue: "6/L3JlZ2lzdHJ5L3BvZHMvYi94.AAAAAAAAAAAAAAAA"}, "not made for this request"},
		{"Get", bound("get", &historypb.Request{Key: key, RangeEnd: []byte("z"), Revision: 6}, "6/L2E"), "outside the range"},
		{"Get", &historypb.Request{Key: key, Continue: "7/L2E"}, "continue is for Log and for Get of a range"},
		{"Get", &historypb.Request{Key: key, RangeEnd: []byte("z"), EndRevision: 5}, "for Log only"},
		{"Get", &historypb.Request{Key: key, Descending: true}, "for Log only"},
		{"Get", &historypb.Request{Key: key, Revision: 3, UnixMs: 1000}, "not both"},
		{"Get", &historypb.Request{Key: key, Revision: -1}, "must not be negative"},
		{"Get", &historypb.Request{Key: key, UnixMs: -1}, "must not be negative"},
		{"Get", &historypb.Request{Key: key, Revision: -1, UnixMs: 1000}, "not both"},

		{"Log", &historypb.Request{}, "key is required"},
		{"Log", &historypb.Request{RangeEnd: []byte("z")}, "key is required"},
		{"Log", &historypb.Request{Key: key, Revision: 3, UnixMs: 1000}, "not both"},
		{"Log", &historypb.Request{Key: key, Limit: -1}, "limit must not be negative"},
		{"Log", &historypb.Request{Key: key, Continue: "garbage"}, "continue token"},
		{"Log", &historypb.Request{Key: key, UnixMs: 1000, Continue: "garbage"}, "continue token"},
		{"Log", &historypb.Request{Key: key, Revision: -1}, "must not be negative"},
		{"Log", &historypb.Request{Key: key, UnixMs: -1}, "must not be negative"},
		{"Log", &historypb.Request{Key: key, EndRevision: -1}, "must not be negative"},
		{"Log", &historypb.Request{Key: key, EndUnixMs: -1}, "must not be negative"},
		{"Log", &historypb.Request{Key: key, EndRevision: 5, EndUnixMs: 1000}, "not both"},
		{"Log", &historypb.Request{Key: key, Revision: 6, EndRevision: 5}, "end_revision 5 is before revision 6"},
		{"Log", &historypb.Request{Key: key, UnixMs: 2000, EndUnixMs: 2000}, "not after unix_ms"},
		{"Log", bound("log", &historypb.Request{Key: key, Descending: true}, "7.3"), "from an ascending page"},
		{"Log", &historypb.Request{Key: key, Descending: true, Continue: "7.3"}, "not made for this request"},
		{"Log", bound("log", &historypb.Request{Key: key}, "7.3.desc"), "from a descending page"},

		{"Restore", &historypb.Request{Revision: 3}, "key is required"},
		{"Restore", &historypb.Request{Key: key}, "give the revision or unix_ms"},
		{"Restore", &historypb.Request{Key: key, RangeEnd: []byte("z"), Revision: 3}, "Restore writes one key"},
		{"Restore", &historypb.Request{Key: key, Revision: 3, Descending: true}, "for Log only"},
		{"Restore", &historypb.Request{Key: key, Revision: 3, UnixMs: 1000}, "not both"},
		{"Restore", &historypb.Request{Key: key, Revision: -3}, "must not be negative"},
		{"Restore", &historypb.Request{Key: key, UnixMs: -3}, "must not be negative"},
		{"Restore", &historypb.Request{Key: key, Revision: 3, IfModRevision: proto.Int64(-1)}, "if_mod_revision must not be negative"},
		{"Get", &historypb.Request{Key: key, IfModRevision: proto.Int64(0)}, "if_mod_revision is for Restore only"},
		{"Log", &historypb.Request{Key: key, IfModRevision: proto.Int64(5)}, "if_mod_revision is for Restore only"},
	} {
		t.Run(fmt.Sprintf("%s %v", tc.method, tc.r), func(t *testing.T) {
			f := &fakeStore{rev: 10}
			wantStatus(t, call(New(f), tc.method, tc.r), codes.InvalidArgument, tc.msg)
			if len(f.calls) != 0 {
				t.Fatalf("an invalid request reached the store: %v", f.calls)
			}
		})
	}
}

// call runs the service's method of that name on r.
func call(s *Service, method string, r *historypb.Request) error {
	var err error
	switch method {
	case "Get":
		_, err = s.Get(context.Background(), r)
	case "Log":
		_, err = s.Log(context.Background(), r)
	case "Restore":
		_, err = s.Restore(context.Background(), r)
	default:
		panic("no method " + method)
	}
	return err
}

func TestGet(t *testing.T) {
	old := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v1"), ModRevision: 4}
	for _, tc := range []struct {
		name  string
		r     *historypb.Request
		calls string
		rev   int64
	}{
		{name: "at a revision", r: &historypb.Request{Key: []byte("k"), Revision: 7}, calls: "KeyAt k 7", rev: 7},
		{name: "now", r: &historypb.Request{Key: []byte("k")}, calls: "KeyAt k 10", rev: 10},
		{name: "at a time", r: &historypb.Request{Key: []byte("k"), UnixMs: 1700000000000}, calls: "KeyAtTime k 1700000000000", rev: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeStore{rev: 10, atRev: 6, kv: old}
			resp, err := New(f).Get(context.Background(), tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(f.calls, "; "); got != tc.calls {
				t.Fatalf("store calls %q, want %q", got, tc.calls)
			}
			if resp.Revision != tc.rev || resp.Kv != old {
				t.Fatalf("answer revision %d kv %v, want %d %v", resp.Revision, resp.Kv, tc.rev, old)
			}
		})
	}
}

func TestLogQuery(t *testing.T) {
	for _, tc := range []struct {
		name  string
		r     *historypb.Request
		want  mvcc.LogQuery // MaxBytes is always MaxLogBytes
		calls string
	}{
		{name: "defaults", r: &historypb.Request{Key: []byte("a")},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), Limit: DefaultLogLimit}, calls: "Log"},
		{name: "range and revision", r: &historypb.Request{Key: []byte("a"), RangeEnd: []byte("b"), Revision: 5},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), []byte("b")), FromRev: 5, Limit: DefaultLogLimit}, calls: "Log"},
		{name: "from key on", r: &historypb.Request{Key: []byte("a"), RangeEnd: []byte{0}},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), []byte{0}), Limit: DefaultLogLimit}, calls: "Log"},
		{name: "limit", r: &historypb.Request{Key: []byte("a"), Limit: 1},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), Limit: 1}, calls: "Log"},
		{name: "limit at the maximum", r: &historypb.Request{Key: []byte("a"), Limit: MaxLogLimit},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), Limit: MaxLogLimit}, calls: "Log"},
		{name: "limit clamped", r: &historypb.Request{Key: []byte("a"), Limit: MaxLogLimit + 1},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), Limit: MaxLogLimit}, calls: "Log"},
		{name: "huge limit clamped", r: &historypb.Request{Key: []byte("a"), Limit: math.MaxInt64},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), Limit: MaxLogLimit}, calls: "Log"},
		{name: "continue", r: bound("log", &historypb.Request{Key: []byte("a"), Revision: 5}, "9.2"),
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), FromRev: 5, After: mvcc.LogCursor{Rev: 9, Sub: 2}, Limit: DefaultLogLimit}, calls: "Log"},
		{name: "from a time", r: &historypb.Request{Key: []byte("a"), UnixMs: 1700000000000},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), FromRev: 8, Limit: DefaultLogLimit}, calls: "FirstRevisionFrom a 1700000000000; Log"},
		{name: "to a revision, newest first", r: bound("log", &historypb.Request{Key: []byte("a"), Revision: 3, EndRevision: 9, Descending: true}, "9.1.desc"),
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), FromRev: 3, ToRev: 9, Descending: true, After: mvcc.LogCursor{Rev: 9, Sub: 1}, Limit: DefaultLogLimit}, calls: "Log"},
		{name: "up to a time", r: &historypb.Request{Key: []byte("a"), EndUnixMs: 1700000000000},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), ToRev: 7, Limit: DefaultLogLimit}, calls: "RevisionBefore a 1700000000000; Log"},
		{name: "a window of times", r: &historypb.Request{Key: []byte("a"), UnixMs: 1600000000000, EndUnixMs: 1700000000000, Descending: true},
			want: mvcc.LogQuery{Range: mvcc.NewKeyRange([]byte("a"), nil), FromRev: 7, ToRev: 7, Descending: true, Limit: DefaultLogLimit}, calls: "FirstRevisionFrom a 1600000000000; RevisionBefore a 1700000000000; Log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeStore{rev: 10, first: 8, firstOK: true, atRev: 7}
			if tc.name == "a window of times" {
				f.first = 7
			}
			if _, err := New(f).Log(context.Background(), tc.r); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(f.calls, "; "); got != tc.calls {
				t.Fatalf("store calls %q, want %q", got, tc.calls)
			}
			tc.want.MaxBytes = MaxLogBytes
			got := f.query
			if !bytes.Equal(got.Range.Key, tc.want.Range.Key) || !bytes.Equal(got.Range.End, tc.want.Range.End) || got.Range.Unbounded != tc.want.Range.Unbounded {
				t.Fatalf("range %+v, want %+v", got.Range, tc.want.Range)
			}
			if got.FromRev != tc.want.FromRev || got.ToRev != tc.want.ToRev || got.Descending != tc.want.Descending || got.After != tc.want.After ||
				got.Limit != tc.want.Limit || got.MaxBytes != tc.want.MaxBytes || got.Keep != nil {
				t.Fatalf("query %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Nothing committed before end_unix_ms, or only before the start: an
// empty page, without a Log.
func TestLogEndingBeforeAnyChange(t *testing.T) {
	for _, tc := range []struct {
		first, before int64
	}{{first: 8, before: 0}, {first: 8, before: 6}} {
		f := &fakeStore{rev: 10, first: tc.first, firstOK: true, atRev: tc.before}
		resp, err := New(f).Log(context.Background(), &historypb.Request{Key: []byte("a"), UnixMs: 1600000000000, EndUnixMs: 1700000000000})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Entries) != 0 || resp.Continue != "" || resp.HeaderRevision != 10 || slices.Contains(f.calls, "Log") {
			t.Fatalf("before %d: answer %v after %q, want an empty page at revision 10 and no Log", tc.before, resp, f.calls)
		}
	}
}

// LogWithin hands its filter to the store, and starts no earlier than
// its bounds' LogFrom.
func TestLogWithinPassesTheBounds(t *testing.T) {
	f := &fakeStore{rev: 10}
	asked := 0
	keep := func([]byte, int64) mvcc.Verdict { asked++; return mvcc.Take }
	from := func(int64) (int64, error) { return 5, nil }
	if _, err := New(f).LogWithin(context.Background(), &historypb.Request{Key: []byte("a"), RangeEnd: []byte("b"), Revision: 2}, Bounds{Keep: keep, LogFrom: from}); err != nil {
		t.Fatal(err)
	}
	if f.query.Keep == nil || f.query.Keep([]byte("a"), 1) != mvcc.Take || asked != 1 {
		t.Fatal("the store's query has not the filter")
	}
	if f.query.FromRev != 5 {
		t.Errorf("a Log from 2 within From 5 read from %d", f.query.FromRev)
	}
	f.calls = nil
	resp, err := New(f).LogWithin(context.Background(), &historypb.Request{Key: []byte("a")}, Bounds{LogFrom: func(int64) (int64, error) { return 11, nil }})
	if err != nil || len(resp.Entries) != 0 || resp.Continue != "" || slices.Contains(f.calls, "Log") {
		t.Errorf("a Log within From past the store's revision: %v %v after %q, want an empty page and no Log", resp, err, f.calls)
	}
}

// A continue token is refused, before the store is asked, for any request
// but the one it was made for: another key, range, revision, time, end,
// order or scope; and a range token whose key lies outside the range, or
// whose revision is past the store's, is refused even with a binding of
// the request (a client can compute one).
func TestContinueBoundToRequest(t *testing.T) {
	base := &historypb.Request{Key: []byte("/registry/secrets/a/"), RangeEnd: []byte("/registry/secrets/a0"), Revision: 3, Limit: 1}
	variants := map[string]func(r *historypb.Request){
		"key":          func(r *historypb.Request) { r.Key = []byte("/registry/secrets/") },
		"range_end":    func(r *historypb.Request) { r.RangeEnd = []byte{0} },
		"revision":     func(r *historypb.Request) { r.Revision = 4 },
		"end_revision": func(r *historypb.Request) { r.EndRevision = 9 },
		"descending":   func(r *historypb.Request) { r.Descending = true },
	}
	f := &fakeStore{rev: 10, page: &mvcc.LogPage{HeaderRev: 10, More: true, Next: mvcc.LogCursor{Rev: 4, Sub: 0}},
		rangePage: &mvcc.RangeAtPage{Kvs: []*mvccpb.KeyValue{{Key: []byte("/registry/secrets/a/x")}}, More: true, Next: []byte("/registry/secrets/a/x")}}
	s := New(f)
	ctx := context.Background()
	lr, err := s.LogWithin(ctx, proto.CloneOf(base), Bounds{Scope: "alice"})
	if err != nil || lr.Continue == "" {
		t.Fatalf("log: %v %v", lr, err)
	}
	gr, err := s.GetWithin(ctx, proto.CloneOf(base), Bounds{Scope: "alice"})
	if err != nil || gr.Continue == "" {
		t.Fatalf("get: %v %v", gr, err)
	}
	// A Log's token is bound to its window; a range Get's carries its
	// revision, and any later page reads it (one naming another is
	// refused, below).
	r := proto.CloneOf(base)
	r.Revision, r.UnixMs, r.Continue = 0, 1700000000000, lr.Continue
	if _, err := s.LogWithin(ctx, r, Bounds{Scope: "alice"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("log: token taken for a request from a time: %v", err)
	}
	r.Revision, r.UnixMs, r.Continue = 0, 0, gr.Continue
	if _, err := s.GetWithin(ctx, r, Bounds{Scope: "alice"}); err != nil {
		t.Errorf("get: a later page without the revision refused: %v", err)
	}
	for name, tok := range map[string]string{"log": lr.Continue, "get": gr.Continue} {
		call := func(r *historypb.Request, scope string) error {
			r.Continue = tok
			f.calls = nil
			var err error
			if name == "log" {
				_, err = s.LogWithin(ctx, r, Bounds{Scope: scope})
			} else {
				_, err = s.GetWithin(ctx, r, Bounds{Scope: scope})
			}
			if err != nil && (status.Code(err) != codes.InvalidArgument || len(f.calls) != 0) {
				t.Errorf("%s: refused with %v after asking the store %q, want InvalidArgument before it", name, err, f.calls)
			}
			return err
		}
		if err := call(proto.CloneOf(base), "alice"); err != nil {
			t.Errorf("%s: its own token refused: %v", name, err)
		}
		r := proto.CloneOf(base)
		r.Limit = 7
		if err := call(r, "alice"); err != nil {
			t.Errorf("%s: its own token with another limit refused: %v", name, err)
		}
		if call(proto.CloneOf(base), "mallory") == nil {
			t.Errorf("%s: token taken under another scope", name)
		}
		for field, change := range variants {
			r := proto.CloneOf(base)
			change(r)
			if call(r, "alice") == nil {
				t.Errorf("%s: token taken for a request with another %s", name, field)
			}
		}
	}
	// Positions outside the request's range or past the store, bound to
	// the request as a client could bind them.
	for _, pos := range []string{"3/" + b64("/registry/"), "3/" + b64("/registry/secrets/a0"), "3/" + b64("/registry/secrets/b/x"), "11/" + b64("/registry/secrets/a/x")} {
		r := proto.CloneOf(base)
		r.Continue = pos + "." + binding("get", r, "alice")
		f.calls = nil
		if _, err := s.GetWithin(ctx, r, Bounds{Scope: "alice"}); status.Code(err) != codes.InvalidArgument || len(f.calls) != 0 {
			t.Errorf("range token at %s: %v after asking the store %q, want InvalidArgument before it", pos, err, f.calls)
		}
	}
	r = proto.CloneOf(base)
	r.Continue = "11.0." + binding("log", r, "alice")
	if _, err := s.LogWithin(ctx, r, Bounds{Scope: "alice"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("log token past the store's revision: %v, want InvalidArgument", err)
	}
}

// bound is r with a continue token at pos, bound to r as the server binds
// its own (no scope).
func bound(method string, r *historypb.Request, pos string) *historypb.Request {
	r.Continue = pos + "." + binding(method, r, "")
	return r
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// A range Get reads the revision asked (or its continue token's) with
// the default page of keys, and hands its continue token on.
func TestGetRange(t *testing.T) {
	f := &fakeStore{rev: 10, rangePage: &mvcc.RangeAtPage{Kvs: []*mvccpb.KeyValue{{Key: []byte("a/1")}}, More: true, Next: []byte("a/1")}}
	resp, err := New(f).Get(context.Background(), &historypb.Request{Key: []byte("a/"), RangeEnd: []byte("a0"), Revision: 6})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Revision != 6 || resp.Kv != nil || len(resp.Kvs) != 1 || resp.Continue == "" || f.rangeQuery.Limit != DefaultRangeLimit || f.rangeQuery.Rev != 6 {
		t.Fatalf("answer %v after %+v", resp, f.rangeQuery)
	}
	f.rangePage = &mvcc.RangeAtPage{}
	resp, err = New(f).Get(context.Background(), &historypb.Request{Key: []byte("a/"), RangeEnd: []byte("a0"), Revision: 6, Continue: resp.Continue, Limit: 20000})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Revision != 6 || resp.Continue != "" || f.rangeQuery.Rev != 6 || string(f.rangeQuery.After) != "a/1" || f.rangeQuery.Limit != MaxLogLimit {
		t.Fatalf("the next page: %v after %+v", resp, f.rangeQuery)
	}
	if got := strings.Join(f.calls, "; "); strings.Contains(got, "RevisionAt") {
		t.Fatalf("store calls %q", got)
	}
}

func TestLogFromATimeWithNoChanges(t *testing.T) {
	f := &fakeStore{rev: 10, firstOK: false}
	resp, err := New(f).Log(context.Background(), &historypb.Request{Key: []byte("a"), UnixMs: 1700000000000})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Entries) != 0 || resp.Continue != "" || resp.HeaderRevision != 10 {
		t.Fatalf("answer %v, want an empty page at revision 10", resp)
	}
	if got := strings.Join(f.calls, "; "); got != "FirstRevisionFrom a 1700000000000" {
		t.Fatalf("store calls %q", got)
	}
}

func TestLogPages(t *testing.T) {
	prev := &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("v1"), ModRevision: 4}
	f := &fakeStore{rev: 10, page: &mvcc.LogPage{
		HeaderRev: 10,
		Events: []*mvcc.Event{
			{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("a"), Value: []byte("v2"), ModRevision: 6}, PrevKv: prev, UnixMs: 1600},
			{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("a"), ModRevision: 7}, UnixMs: 1700},
		},
		More: true,
		Next: mvcc.LogCursor{Rev: 7, Sub: 3},
	}}
	s := New(f)
	resp, err := s.Log(context.Background(), &historypb.Request{Key: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.HeaderRevision != 10 || len(resp.Entries) != 2 {
		t.Fatalf("answer %v", resp)
	}
	put, del := resp.Entries[0], resp.Entries[1]
	if put.Revision != 6 || put.UnixMs != 1600 || put.Deleted != 0 || string(put.Kv.Value) != "v2" || put.PrevKv != prev {
		t.Errorf("put entry %v", put)
	}
	if del.Revision != 7 || del.UnixMs != 1700 || del.Deleted != 1 || del.PrevKv != nil {
		t.Errorf("delete entry %v", del)
	}
	// The token brings the next page on from the last entry returned.
	if resp.Continue == "" {
		t.Fatal("no continue token on a page with more")
	}
	f.page = &mvcc.LogPage{HeaderRev: 10}
	resp, err = s.Log(context.Background(), &historypb.Request{Key: []byte("a"), Continue: resp.Continue})
	if err != nil {
		t.Fatal(err)
	}
	if f.query.After != (mvcc.LogCursor{Rev: 7, Sub: 3}) {
		t.Fatalf("next page after %+v, want {7 3}", f.query.After)
	}
	if resp.Continue != "" {
		t.Fatalf("continue token %q on the last page", resp.Continue)
	}
}

func TestContinueTokens(t *testing.T) {
	for _, c := range []mvcc.LogCursor{{Rev: 1, Sub: 0}, {Rev: 7, Sub: 3}, {Rev: math.MaxInt64, Sub: math.MaxInt64}} {
		for _, desc := range []bool{false, true} {
			r := &historypb.Request{Key: []byte("a"), Descending: desc}
			bind := binding("log", r, "")
			tok := formatLogContinue(c, desc, bind)
			got, err := parseLogContinue(tok, r, bind, math.MaxInt64)
			if err != nil || got != c {
				t.Errorf("parseLogContinue(formatLogContinue(%+v, %v) = %q) = %+v, %v", c, desc, tok, got, err)
			}
			// A page is never continued in the other order.
			other := &historypb.Request{Key: []byte("a"), Descending: !desc}
			_, err = parseLogContinue(tok, other, binding("log", other, ""), math.MaxInt64)
			wantStatus(t, err, codes.InvalidArgument, fmt.Sprintf("continue token %q", tok))
		}
	}
	r := &historypb.Request{Key: []byte("a")}
	bind := binding("log", r, "")
	if got, err := parseLogContinue("", r, bind, 10); err != nil || got != (mvcc.LogCursor{}) {
		t.Errorf(`parseLogContinue("") = %+v, %v; want the start`, got, err)
	}
	for _, pos := range []string{
		"x", "7", "7.", ".3", "7.3.1", "a.b", "7.b", "0.0", "-1.0", "7.-1", " 7.3", "7.3 ", "7,3",
		"99999999999999999999.0", "7.99999999999999999999", "7.3.desc", "11.0",
	} {
		for _, tok := range []string{pos, pos + "." + bind} {
			_, err := parseLogContinue(tok, r, bind, 10)
			wantStatus(t, err, codes.InvalidArgument, fmt.Sprintf("continue token %q", tok))
		}
	}
}

func TestToStatus(t *testing.T) {
	oor := &mvcc.OutOfRangeError{Msg: "revision 3 is older than the oldest retained revision 5"}
	given := status.Error(codes.Aborted, "quantykube: kept changing")
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{oor, codes.OutOfRange, "quantykube: revision 3 is older than the oldest retained revision 5"},
		{fmt.Errorf("log: %w", oor), codes.OutOfRange, "quantykube: revision 3 is older"},
		{context.Canceled, codes.Canceled, "context canceled"},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "deadline exceeded"},
		{mvcc.ErrClosed, codes.Unavailable, "quantykube: server stopping"},
		{fmt.Errorf("write: %w", mvcc.ErrClosed), codes.Unavailable, "quantykube: server stopping"},
		{given, codes.Aborted, "quantykube: kept changing"},
		{errors.New("disk I/O error"), codes.Unavailable, "quantykube: database: disk I/O error"},
	} {
		got := toStatus(tc.err)
		st, ok := status.FromError(got)
		if !ok || st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("toStatus(%v) = %v, want %v %q", tc.err, got, tc.code, tc.msg)
		}
	}
	if toStatus(nil) != nil {
		t.Error("toStatus(nil) is not nil")
	}
	if got := toStatus(given); got != given {
		t.Errorf("a status error was rebuilt: %v", got)
	}
}

// TestStoreErrors checks that each method answers a store error with its
// status: the request was fine, the store could not serve it.
func TestStoreErrors(t *testing.T) {
	oor := &mvcc.OutOfRangeError{Msg: "revision 2 is older than the oldest retained revision 5"}
	for _, tc := range []struct {
		method string
		r      *historypb.Request
	}{
		{"Get", &historypb.Request{Key: []byte("k"), Revision: 2}},
		{"Get", &historypb.Request{Key: []byte("k"), UnixMs: 1000}},
		{"Log", &historypb.Request{Key: []byte("k"), Revision: 2}},
		{"Log", &historypb.Request{Key: []byte("k"), UnixMs: 1000}},
		{"Restore", &historypb.Request{Key: []byte("k"), Revision: 2}},
		{"Restore", &historypb.Request{Key: []byte("k"), UnixMs: 1000}},
	} {
		t.Run(fmt.Sprintf("%s %v", tc.method, tc.r), func(t *testing.T) {
			wantStatus(t, call(New(&fakeStore{rev: 10, err: oor}), tc.method, tc.r), codes.OutOfRange, oor.Msg)
			wantStatus(t, call(New(&fakeStore{rev: 10, err: errors.New("connection refused")}), tc.method, tc.r), codes.Unavailable, "connection refused")
		})
	}
}

func TestRestore(t *testing.T) {
	old := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v1"), ModRevision: 4, Lease: 99}
	changed := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v2"), ModRevision: 8}
	for _, tc := range []struct {
		name    string
		old     *mvccpb.KeyValue // the key at revision 4
		current *mvccpb.KeyValue
		fails   int
		write   string // the Txn's operation, "" for none
		newRev  int64
		err     codes.Code
	}{
		{name: "already as it was", old: old, current: &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v1"), ModRevision: 9}},
		{name: "already absent", old: nil, current: nil},
		{name: "put back", old: old, current: changed, write: "put k=v1", newRev: 11},
		{name: "recreated", old: old, current: nil, write: "put k=v1", newRev: 11},
		{name: "deleted again", old: nil, current: changed, write: "delete k", newRev: 11},
		{name: "a writer in between", old: old, current: changed, fails: 1, write: "put k=v1", newRev: 11},
		{name: "a writer every time", old: old, current: changed, fails: restoreAttempts, err: codes.Aborted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The write, if any, takes revision 11.
			written := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v1"), ModRevision: 11, CreateRevision: 2, Version: 5}
			f := &fakeStore{rev: 10, kvAt: map[int64]*mvccpb.KeyValue{4: tc.old, 11: written}, current: tc.current, fails: tc.fails}
			resp, err := New(f).Restore(context.Background(), &historypb.Request{Key: []byte("k"), Revision: 4})
			if tc.err != codes.OK {
				wantStatus(t, err, tc.err, "kept changing")
				if len(f.txns) != restoreAttempts {
					t.Fatalf("%d attempts, want %d", len(f.txns), restoreAttempts)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Revision != 4 || resp.NewRevision != tc.newRev {
				t.Fatalf("revision %d new revision %d, want 4 %d", resp.Revision, resp.NewRevision, tc.newRev)
			}
			// The answer is the state as written, or as it already was
			// (without the lease, which is not restored).
			switch {
			case tc.old == nil:
				if resp.Kv != nil {
					t.Fatalf("restored %v, want the key absent", resp.Kv)
				}
			case tc.write != "":
				if resp.Kv != written {
					t.Fatalf("restored %v, want the state written %v", resp.Kv, written)
				}
			default:
				if !bytes.Equal(resp.Kv.Key, old.Key) || !bytes.Equal(resp.Kv.Value, old.Value) || resp.Kv.Lease != 0 {
					t.Fatalf("restored %v from %v", resp.Kv, tc.old)
				}
			}
			if tc.write == "" {
				if len(f.txns) != 0 {
					t.Fatalf("wrote %v", f.txns)
				}
				return
			}
			if len(f.txns) != tc.fails+1 {
				t.Fatalf("%d Txns, want %d", len(f.txns), tc.fails+1)
			}
			// Each write is conditional on the state read just before it.
			var wantMod int64
			if tc.current != nil {
				wantMod = tc.current.ModRevision
			}
			for _, txn := range f.txns {
				if len(txn.Compare) != 1 || txn.Compare[0].Target != pb.Compare_MOD || txn.Compare[0].Result != pb.Compare_EQUAL || txn.Compare[0].GetModRevision() != wantMod {
					t.Fatalf("compare %v, want mod_revision = %d", txn.Compare, wantMod)
				}
				var got string
				switch op := txn.Success[0].Request.(type) {
				case *pb.RequestOp_RequestPut:
					got = fmt.Sprintf("put %s=%s", op.RequestPut.Key, op.RequestPut.Value)
					if op.RequestPut.Lease != 0 {
						t.Fatalf("restored with lease %d", op.RequestPut.Lease)
					}
				case *pb.RequestOp_RequestDeleteRange:
					got = fmt.Sprintf("delete %s", op.RequestDeleteRange.Key)
				}
				if len(txn.Success) != 1 || got != tc.write {
					t.Fatalf("wrote %v, want %s", txn.Success, tc.write)
				}
			}
		})
	}
}

// With if_mod_revision, a restore writes only over the state the caller
// saw: the key at that mod_revision, or absent for 0. Any other state,
// even one the restore would leave as it is, and a change between the
// read and the write, refuse it as ABORTED with nothing written.
func TestRestoreIfModRevision(t *testing.T) {
	old := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v1"), ModRevision: 4}
	changed := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v2"), ModRevision: 8}
	same := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v1"), ModRevision: 9}
	for _, tc := range []struct {
		name    string
		old     *mvccpb.KeyValue // the key at revision 4
		current *mvccpb.KeyValue
		writer  *mvccpb.KeyValue // the state a writer in between leaves
		ifMod   int64
		refused string // the start of the refusal, "" to restore
		txns    int
	}{
		{name: "at it", old: old, current: changed, ifMod: 8, txns: 1},
		{name: "absent as wanted", old: old, ifMod: 0, txns: 1},
		{name: "already as it was, at it", old: old, current: same, ifMod: 9},
		{name: "changed since", old: old, current: changed, ifMod: 7, refused: `"k" changed since it was read: it is at mod_revision 8, not at mod_revision 7 (if_mod_revision 7)`},
		{name: "created since", old: old, current: changed, ifMod: 0, refused: "it is at mod_revision 8, not absent (if_mod_revision 0)"},
		{name: "deleted since", old: nil, ifMod: 8, refused: "it is absent, not at mod_revision 8"},
		{name: "already as it was, but changed since", old: old, current: same, ifMod: 8, refused: "it is at mod_revision 9, not at mod_revision 8"},
		{name: "a writer in between", old: old, current: changed, writer: same, ifMod: 8, refused: "it is at mod_revision 9, not at mod_revision 8", txns: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeStore{rev: 10, kvAt: map[int64]*mvccpb.KeyValue{4: tc.old}, current: tc.current, writer: tc.writer}
			if tc.writer != nil {
				f.fails = 1
			}
			checks := 0
			check := func(context.Context, *mvccpb.KeyValue, *mvccpb.KeyValue) (*RestoreWrite, error) {
				checks++
				return nil, nil
			}
			resp, err := New(f).RestoreChecked(context.Background(), &historypb.Request{Key: []byte("k"), Revision: 4, IfModRevision: proto.Int64(tc.ifMod)}, Bounds{}, check)
			if tc.refused != "" {
				wantStatus(t, err, codes.Aborted, tc.refused)
			} else if err != nil {
				t.Fatal(err)
			}
			if len(f.txns) != tc.txns {
				t.Fatalf("%d Txns, want %d", len(f.txns), tc.txns)
			}
			if tc.txns > 0 && f.txns[0].Compare[0].GetModRevision() != tc.ifMod {
				t.Fatalf("compare %v, want mod_revision = %d", f.txns[0].Compare, tc.ifMod)
			}
			if tc.refused == "" && tc.txns > 0 && resp.NewRevision != 11 {
				t.Fatalf("new revision %d, want 11", resp.NewRevision)
			}
			// The caller's access is checked before each attempt, so
			// before anything is said about the key's state.
			attempts := 1
			if tc.writer != nil {
				attempts = 2
			}
			if checks != attempts {
				t.Fatalf("%d access checks, want %d", checks, attempts)
			}
		})
	}
}

// A check shapes the write: the value it gives is written instead of the
// old state's, in one transaction with its other writes and conditions;
// a state already equal to that value is left alone.
func TestRestoreCheckShapesTheWrite(t *testing.T) {
	old := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("old, with status"), ModRevision: 4}
	cur := &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("now"), ModRevision: 9}
	f := &fakeStore{rev: 10, kvAt: map[int64]*mvccpb.KeyValue{4: old, 11: {Key: []byte("k"), Value: []byte("old, without")}}, current: cur}
	also := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("other"), Value: []byte("x")}}}
	cond := &pb.Compare{Key: []byte("other"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 3}}
	check := func(context.Context, *mvccpb.KeyValue, *mvccpb.KeyValue) (*RestoreWrite, error) {
		return &RestoreWrite{Value: []byte("old, without"), Also: []*pb.RequestOp{also}, If: []*pb.Compare{cond}}, nil
	}
	resp, err := New(f).RestoreChecked(context.Background(), &historypb.Request{Key: []byte("k"), Revision: 4}, Bounds{}, check)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.txns) != 1 {
		t.Fatalf("%d transactions", len(f.txns))
	}
	txn := f.txns[0]
	if len(txn.Success) != 2 || string(txn.Success[0].GetRequestPut().Value) != "old, without" || txn.Success[1] != also ||
		len(txn.Compare) != 2 || txn.Compare[1] != cond {
		t.Errorf("transaction %v, want the shaped value, the other write and its condition", txn)
	}
	if string(resp.Kv.GetValue()) != "old, without" || resp.NewRevision != 11 {
		t.Errorf("answer %v, want the value as written", resp)
	}
	f.current, f.txns = &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("old, without"), ModRevision: 11}, nil
	if _, err := New(f).RestoreChecked(context.Background(), &historypb.Request{Key: []byte("k"), Revision: 4}, Bounds{}, check); err != nil || len(f.txns) != 0 {
		t.Errorf("a key already at the shaped value: %v, %d transactions; want none", err, len(f.txns))
	}
}
