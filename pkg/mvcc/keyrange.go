package mvcc

import "bytes"

// KeyRange is etcd's [Key, End) with its conventions already resolved:
// End == nil means the single key Key; Unbounded means every key >= Key.
type KeyRange struct {
	Key       []byte
	End       []byte
	Unbounded bool
}

// NewKeyRange applies etcd's range_end rules: empty is a single key, "\x00"
// is everything from key on, anything else the keys before it.
func NewKeyRange(key, end []byte) KeyRange {
	switch {
	case len(end) == 0:
		return KeyRange{Key: key}
	case len(end) == 1 && end[0] == 0:
		return KeyRange{Key: key, Unbounded: true}
	default:
		return KeyRange{Key: key, End: end}
	}
}

// PrefixRange is the range of keys starting with p (every key for an
// empty p, or one of only 0xff bytes).
func PrefixRange(p []byte) KeyRange {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return KeyRange{Key: p, End: end[:i+1]}
		}
	}
	return KeyRange{Key: p, Unbounded: true}
}

// Single reports whether the range names exactly one key.
func (r KeyRange) Single() bool { return r.End == nil && !r.Unbounded }

// Empty reports whether no key can fall in the range (end <= key).
func (r KeyRange) Empty() bool {
	return r.End != nil && bytes.Compare(r.End, r.Key) <= 0
}

// Contains reports whether k is in the range.
func (r KeyRange) Contains(k []byte) bool {
	c := bytes.Compare(k, r.Key)
	switch {
	case c < 0:
		return false
	case r.Unbounded:
		return true
	case r.End == nil:
		return c == 0
	default:
		return bytes.Compare(k, r.End) < 0
	}
}

// Overlaps reports whether two ranges share a key.
func (r KeyRange) Overlaps(o KeyRange) bool {
	if r.Empty() || o.Empty() {
		return false
	}
	if r.Single() {
		return o.Contains(r.Key)
	}
	if o.Single() {
		return r.Contains(o.Key)
	}
	// [a1,a2) and [b1,b2) overlap iff a1 < b2 and b1 < a2 (unbounded = +inf).
	less := func(k []byte, x KeyRange) bool { return x.Unbounded || bytes.Compare(k, x.End) < 0 }
	return less(r.Key, o) && less(o.Key, r)
}

// shape is the range's KeyShape in a statement.
func (r KeyRange) shape() KeyShape {
	switch {
	case r.Single():
		return OneKey
	case r.Unbounded:
		return FromKey
	}
	return KeyBetween
}

// args appends the arguments that stand for the range in a statement of
// its shape: Key, and End where the range has one.
func (r KeyRange) args(args []any) []any {
	if r.shape() == KeyBetween {
		return append(args, r.Key, r.End)
	}
	return append(args, r.Key)
}
