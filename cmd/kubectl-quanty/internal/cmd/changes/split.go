package changes

// The changes window past a key prefix kept for less. Retention rules
// differ by prefix (--retain-prefix: leases keep ten minutes, and an
// operator may keep a namespace's ConfigMaps for less), and QuantyKube
// refuses a window that would list a key below its own rule's floor,
// naming the prefix and its floor (docs/HISTORY.md): listing it as if
// complete would hide changes it no longer holds. The plugin then does
// what the answer asks: it reads the window around that prefix, and the
// prefix itself from its floor on, and names it. Only a window older
// than what every key is kept for is the error.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
)

// shortRule reads the prefix and floor from QuantyKube's refusal of a
// window that reaches below a key's rule (pkg/mvcc's OutOfRangeError).
var shortRule = regexp.MustCompile(`oldest retained revision (\d+) \(([^)]*)\) of the keys under ("(?:[^"\\]|\\.)*")`)

// maxHoles bounds the prefixes a listing goes around: each costs a
// request of its own, and an operator's rules are a handful.
const maxHoles = 16

// keySpan is a part of the listing's range, read from its window's start,
// or from a short rule's floor (from > 0).
type keySpan struct {
	key, end []byte
	from     int64
}

// readAround reads q's window span by span, going around each
// prefix QuantyKube names as kept for less than the window.
func (o *Options) readAround(ctx context.Context, q *query) ([]Row, int64, error) {
	spans := []keySpan{{key: q.req.Key, end: q.req.RangeEnd}}
	var rows []Row
	var header int64
	var warnings []string
	for i := 0; i < len(spans); i++ {
		sp := spans[i]
		one := *q
		one.req = proto.CloneOf(q.req)
		one.req.Key, one.req.RangeEnd = sp.key, sp.end
		if sp.from > 0 {
			one.req.Revision, one.req.UnixMs = sp.from, 0
		}
		got, h, err := o.readWhole(ctx, &one)
		if m := shortRule.FindStringSubmatch(errString(err)); errors.Is(err, api.ErrOutsideRetention) && m != nil && sp.from == 0 && len(spans) < maxHoles {
			prefix, perr := strconv.Unquote(m[3])
			floor, ferr := strconv.ParseInt(m[1], 10, 64)
			if perr == nil && ferr == nil && prefix != "" {
				spans = append(spans, around(sp, []byte(prefix), floor)...)
				warnings = append(warnings, fmt.Sprintf("Warning: QuantyKube keeps the keys under %s for less than the window (--retain-prefix): their changes are listed from %s (revision %d) on.\n",
					prefix, m[2], floor))
				continue
			}
		}
		if err != nil {
			return nil, 0, err
		}
		rows = append(rows, got...)
		header = max(header, h)
	}
	for _, w := range warnings {
		fmt.Fprint(o.ErrOut, w)
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		if q.req.Descending {
			return cmp.Compare(b.Revision, a.Revision)
		}
		return cmp.Compare(a.Revision, b.Revision)
	})
	if q.limit > 0 && len(rows) > q.limit {
		rows = rows[:q.limit]
	}
	return rows, header, nil
}

// around splits span sp at prefix: the parts before and after it, from
// the window's start, and the prefix's own part, from floor on.
func around(sp keySpan, prefix []byte, floor int64) []keySpan {
	pend := prefixEnd(prefix)
	var out []keySpan
	add := func(k, e []byte, from int64) {
		if bytes.Compare(k, e) < 0 {
			out = append(out, keySpan{key: k, end: e, from: from})
		}
	}
	add(sp.key, minBytes(prefix, sp.end), 0)
	add(maxBytes(pend, sp.key), sp.end, 0)
	add(maxBytes(prefix, sp.key), minBytes(pend, sp.end), floor)
	return out
}

// prefixEnd is the first key after every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

func minBytes(a, b []byte) []byte {
	if bytes.Compare(a, b) < 0 {
		return a
	}
	return b
}

func maxBytes(a, b []byte) []byte {
	if bytes.Compare(a, b) > 0 {
		return a
	}
	return b
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
