package history

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// Continue tokens name where a page stopped, and the request the page
// answered: a token is valid only with the request it was made for (its
// key, range, revision or time, end, order, and the caller's scope; a
// range Get's carries its revision itself), and its position only inside
// that request's range (ADR-036).
//
//	Log:        REV.SUB.BINDING          (descending: REV.SUB.desc.BINDING)
//	Get range:  REV/KEY.BINDING          KEY base64url, the last key the page read
//
// The binding is a digest of the request, not a secret: a client can make
// a token for its own request, at any position, as it could ask for any
// page of it by itself (after, revision). What a token cannot do is move
// a request outside what it asked for, and so outside what was authorized:
// its position is checked against the request's range and window before
// anything is read, and a token of another request or caller is refused.
// Tokens are valid on any replica, because they name changes and keys,
// not a position in one server's memory.

// bindingBytes is how much of the digest a token carries: 96 bits, so
// that no token of one request passes as another's by chance.
const bindingBytes = 12

// binding is the digest of what a page of r answers, for method ("log",
// "get") and the caller's scope (Bounds.Scope): every field that decides
// which entries the listing holds, but its limit, which a client may
// change from page to page, and a range Get's revision and time, which
// its token carries itself (every page reads the revision of the first,
// whatever a later request says of it).
func binding(method string, r *historypb.Request, scope string) string {
	if method == "get" {
		r = &historypb.Request{Key: r.Key, RangeEnd: r.RangeEnd}
	}
	h := sha256.New()
	field := func(b []byte) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	num := func(v int64) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	field([]byte(method))
	field(r.Key)
	field(r.RangeEnd)
	num(r.Revision)
	num(r.UnixMs)
	num(r.EndRevision)
	num(r.EndUnixMs)
	if r.Descending {
		num(1)
	} else {
		num(0)
	}
	field([]byte(scope))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:bindingBytes])
}

// foreign is the refusal of a token that was not made for this request.
func foreign(tok string) error {
	return invalid("continue token %q was not made for this request: send the request that returned it (same key, range, revision or time, end and order) unchanged, or start over without it", tok)
}

// cutBinding splits a token into its position and binding, and checks the
// binding against the request's.
func cutBinding(tok, want string) (string, error) {
	i := strings.LastIndexByte(tok, '.')
	if i < 0 {
		return "", invalid("continue token %q is not one this server gave", tok)
	}
	if tok[i+1:] != want {
		return "", foreign(tok)
	}
	return tok[:i], nil
}

// formatLogContinue is a Log page's token: where it stopped, "REV.SUB"
// (a descending page's "REV.SUB.desc", so that it is never continued the
// other way, which would skip or repeat the entries on one side of it).
func formatLogContinue(c mvcc.LogCursor, descending bool, bind string) string {
	if descending {
		return fmt.Sprintf("%d.%d.desc.%s", c.Rev, c.Sub, bind)
	}
	return fmt.Sprintf("%d.%d.%s", c.Rev, c.Sub, bind)
}

// parseLogContinue reads a Log page's token for r (empty: none), checks
// it is r's, and that its position is a change the store may have made:
// at or below rev, the store's revision.
func parseLogContinue(tok string, r *historypb.Request, bind string, rev int64) (mvcc.LogCursor, error) {
	if tok == "" {
		return mvcc.LogCursor{}, nil
	}
	pos, err := cutBinding(tok, bind)
	if err != nil {
		return mvcc.LogCursor{}, err
	}
	body, desc := strings.CutSuffix(pos, ".desc")
	a, b, ok := strings.Cut(body, ".")
	c := mvcc.LogCursor{}
	var err1, err2 error
	c.Rev, err1 = strconv.ParseInt(a, 10, 64)
	c.Sub, err2 = strconv.ParseInt(b, 10, 64)
	switch {
	case !ok || err1 != nil || err2 != nil || c.Rev < 1 || c.Sub < 0:
		return mvcc.LogCursor{}, invalid("continue token %q is not one this server gave", tok)
	case desc && !r.Descending:
		return mvcc.LogCursor{}, invalid("continue token %q is from a descending page: send descending with it", tok)
	case !desc && r.Descending:
		return mvcc.LogCursor{}, invalid("continue token %q is from an ascending page: a descending Log starts without one", tok)
	}
	if c.Rev > rev {
		return mvcc.LogCursor{}, invalid("continue token %q is past the store's revision %d: not one this server gave", tok, rev)
	}
	return c, nil
}

// formatRangeContinue is a range Get page's token: the revision every
// page of the listing reads, and the last key the page read.
func formatRangeContinue(rev int64, after []byte, bind string) string {
	return strconv.FormatInt(rev, 10) + "/" + base64.RawURLEncoding.EncodeToString(after) + "." + bind
}

// parseRangeContinue reads a range Get's token for r, checks it is r's,
// that its revision is at most rev (the store's), and that its key lies
// in r's range: the next page reads after that key, and never outside
// [key, range_end).
func parseRangeContinue(tok string, r *historypb.Request, bind string, rev int64) (int64, []byte, error) {
	pos, err := cutBinding(tok, bind)
	if err != nil {
		return 0, nil, err
	}
	a, b, ok := strings.Cut(pos, "/")
	at, err1 := strconv.ParseInt(a, 10, 64)
	key, err2 := base64.RawURLEncoding.DecodeString(b)
	if !ok || err1 != nil || err2 != nil || at < 1 || len(key) == 0 {
		return 0, nil, invalid("continue token %q is not one this server gave for a range", tok)
	}
	if at > rev {
		return 0, nil, invalid("continue token %q is of revision %d, past the store's revision %d: not one this server gave", tok, at, rev)
	}
	if !mvcc.NewKeyRange(r.Key, r.RangeEnd).Contains(key) {
		return 0, nil, invalid("continue token %q names a key outside the range asked for", tok)
	}
	return at, key, nil
}
