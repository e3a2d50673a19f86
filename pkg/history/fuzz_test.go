package history

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// FuzzRequest decodes any bytes as a History request and sends it to Log
// and Get: nothing panics; a request refused is refused with
// InvalidArgument before the store is asked anything; a Log request
// accepted reaches the store as its key range, a limit within bounds and
// the position its continue token names, unless the times it names leave
// an empty window, which is answered without reading a change.
func FuzzRequest(f *testing.F) {
	for _, r := range []*historypb.Request{
		{Key: []byte("/registry/pods/ns/a")},
		{Key: []byte("/registry/"), RangeEnd: []byte("/registry0"), Limit: 10, Continue: "7.2"},
		{Key: []byte{0}, RangeEnd: []byte{0}, Revision: 5},
		{Key: []byte("k"), UnixMs: 1700000000000},
		{Key: []byte("k"), Revision: 3, UnixMs: 5},
		{Key: []byte("k"), Limit: -1},
		{Key: []byte("k"), Limit: 1 << 40},
		{Key: []byte("k"), Continue: "0.0"},
		{Key: []byte("b"), RangeEnd: []byte("a")},
		{Key: []byte("0"), UnixMs: 48, EndUnixMs: 6204},
		{Key: []byte("0"), Revision: 70, EndUnixMs: 6204},
		{},
	} {
		if r.Continue != "" {
			// A token of this very request, so that accepted tokens are
			// among the seeds too.
			r.Continue += "." + binding("log", r, "")
		}
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &historypb.Request{}
		if proto.Unmarshal(b, r) != nil {
			return
		}
		st := &fakeStore{rev: 100, atRev: 50, first: 60, firstOK: true}
		s := New(st)
		resp, err := s.Log(context.Background(), r)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument {
				t.Fatalf("Log %v: %v, want InvalidArgument", r, err)
			}
			if len(st.calls) != 0 {
				t.Fatalf("Log %v was refused (%v) after asking the store %q", r, err, st.calls)
			}
		} else {
			if len(r.Key) == 0 || r.Limit < 0 || (r.Revision != 0 && r.UnixMs != 0) || r.Revision < 0 || r.UnixMs < 0 {
				t.Fatalf("Log accepted %v", r)
			}
			// The fake's first revision from unix_ms is st.first and its
			// last before end_unix_ms is st.atRev: a window starting after
			// it ends holds nothing.
			from := r.Revision
			if r.UnixMs != 0 {
				from = st.first
			}
			empty := r.EndUnixMs != 0 && st.atRev < from
			switch read := slices.Contains(st.calls, "Log"); {
			case empty && (read || len(resp.Entries) != 0 || resp.Continue != ""):
				t.Fatalf("Log %v of an empty window read the changes (%q) or answered %v", r, st.calls, resp)
			case !empty && !read:
				t.Fatalf("Log %v answered without reading the changes (%q)", r, st.calls)
			}
		}
		if err == nil && slices.Contains(st.calls, "Log") {
			q := st.query
			want := mvcc.NewKeyRange(r.Key, r.RangeEnd)
			if !bytes.Equal(q.Range.Key, want.Key) || !bytes.Equal(q.Range.End, want.End) || q.Range.Unbounded != want.Unbounded {
				t.Fatalf("Log %v read the range %+v, want %+v", r, q.Range, want)
			}
			if q.Limit < 1 || q.Limit > MaxLogLimit || (r.Limit > 0 && int64(q.Limit) != min(r.Limit, MaxLogLimit)) {
				t.Fatalf("Log %v read with limit %d", r, q.Limit)
			}
			if after, err := parseLogContinue(r.Continue, r, binding("log", r, ""), st.rev); err != nil || after != q.After {
				t.Fatalf("Log %v read after %+v, its token names %+v (%v)", r, q.After, after, err)
			}
		}
		st.calls = nil
		if _, err := s.Get(context.Background(), r); err != nil && status.Code(err) == codes.InvalidArgument && len(st.calls) != 0 {
			t.Fatalf("Get %v was refused (%v) after asking the store %q", r, err, st.calls)
		}
	})
}

// FuzzContinue: any token, for any request, parses or is refused with
// InvalidArgument without panicking. One that parses is the request's
// own (its binding), names a position the server writes back the same
// way, no later than the store's revision, and, for a range, a key inside
// the range asked for; it is refused for the same request under another
// scope, or in the other order.
func FuzzContinue(f *testing.F) {
	for _, tok := range []string{"", "1.0", "7.2", "0.0", "-1.3", "1.-1", "9223372036854775807.9223372036854775807", "1", "a.b", "1.2.3", "01.2", "+1.2", "7.2.desc", "7.desc", ".desc", "7/L3JlZ2lzdHJ5Lw", "7/AA", "/", "7/"} {
		f.Add([]byte("/registry/secrets/ns/"), []byte("/registry/secrets/ns0"), false, tok, true)
		f.Add([]byte("/registry/secrets/ns/"), []byte{0}, true, tok, false)
	}
	const rev = 100
	f.Fuzz(func(t *testing.T, key, end []byte, desc bool, tok string, bind bool) {
		r := &historypb.Request{Key: key, RangeEnd: end, Descending: desc}
		if bind && tok != "" {
			// Half the inputs carry the request's own binding, so that the
			// positions in them reach the checks behind it.
			method := "log"
			if strings.Contains(tok, "/") {
				method = "get"
			}
			tok += "." + binding(method, r, "scope")
		}
		c, err := parseLogContinue(tok, r, binding("log", r, "scope"), rev)
		switch {
		case err != nil && status.Code(err) != codes.InvalidArgument:
			t.Fatalf("log token %q: %v", tok, err)
		case err == nil && tok == "" && c != (mvcc.LogCursor{}):
			t.Fatalf("empty token read as %+v", c)
		case err == nil && tok != "":
			if c.Rev < 1 || c.Sub < 0 || c.Rev > rev {
				t.Fatalf("log token %q read as %+v (store at %d)", tok, c, rev)
			}
			again, err := parseLogContinue(formatLogContinue(c, desc, binding("log", r, "scope")), r, binding("log", r, "scope"), rev)
			if err != nil || again != c {
				t.Fatalf("log token %q read as %+v, read back as %+v (%v)", tok, c, again, err)
			}
			if _, err := parseLogContinue(tok, r, binding("log", r, "other"), rev); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("log token %q was taken under another scope (%v)", tok, err)
			}
			other := proto.CloneOf(r)
			other.Descending = !desc
			if _, err := parseLogContinue(tok, other, binding("log", other, "scope"), rev); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("log token %q was taken for a page of the other order (%v)", tok, err)
			}
		}
		if tok == "" {
			return
		}
		at, after, err := parseRangeContinue(tok, r, binding("get", r, "scope"), rev)
		switch {
		case err != nil && status.Code(err) != codes.InvalidArgument:
			t.Fatalf("range token %q: %v", tok, err)
		case err == nil:
			if at < 1 || at > rev || !mvcc.NewKeyRange(key, end).Contains(after) || bytes.Compare(after, key) < 0 {
				t.Fatalf("range token %q for [%q, %q) read as revision %d after %q", tok, key, end, at, after)
			}
			back := formatRangeContinue(at, after, binding("get", r, "scope"))
			if at2, after2, err := parseRangeContinue(back, r, binding("get", r, "scope"), rev); err != nil || at2 != at || !bytes.Equal(after2, after) {
				t.Fatalf("range token %q read as %d %q, read back as %d %q (%v)", tok, at, after, at2, after2, err)
			}
			if _, _, err := parseRangeContinue(tok, r, binding("get", r, "other"), rev); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("range token %q was taken under another scope (%v)", tok, err)
			}
		}
	})
}
