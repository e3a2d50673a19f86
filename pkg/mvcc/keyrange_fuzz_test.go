package mvcc

import (
	"bytes"
	"testing"
)

// etcdContains is etcd's rule for whether k is in the range [key, end),
// stated directly: an empty end is key alone, the one byte "\x00" every
// key from key on, anything else the keys from key up to end.
func etcdContains(key, end, k []byte) bool {
	switch {
	case len(end) == 0:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	default:
		return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
	}
}

// FuzzKeyRange holds the translation of etcd's (key, range_end) into a
// KeyRange, and the range operations the engine builds on it (Contains,
// Empty, Single, Overlaps, PrefixRange), to etcd's rules stated directly.
func FuzzKeyRange(f *testing.F) {
	f.Add([]byte("a"), []byte(""), []byte("a"), []byte("b"), []byte("a"))
	f.Add([]byte("a"), []byte{0}, []byte("b"), []byte("c"), []byte("zz"))
	f.Add([]byte("b"), []byte("a"), []byte("a"), []byte("c"), []byte("b"))
	f.Add([]byte{0}, []byte{0}, []byte{0xff}, []byte{0}, []byte{0xff, 0xff})
	f.Add([]byte("a"), []byte("a\x00"), []byte("a"), []byte{}, []byte("a\x00"))
	f.Add([]byte{0xff, 0xff}, []byte{}, []byte{0xff}, []byte{0}, []byte{})
	f.Fuzz(func(t *testing.T, key, end, key2, end2, probe []byte) {
		r, o := NewKeyRange(key, end), NewKeyRange(key2, end2)
		for _, k := range [][]byte{probe, key, end, key2, end2, append(bytes.Clone(key), 0)} {
			if got, want := r.Contains(k), etcdContains(key, end, k); got != want {
				t.Fatalf("NewKeyRange(%q, %q).Contains(%q) = %v, etcd: %v", key, end, k, got, want)
			}
			if r.Empty() && r.Contains(k) {
				t.Fatalf("%s is empty but holds %q", fmtRange(r), k)
			}
		}
		if r.Single() != (len(end) == 0) {
			t.Fatalf("%s: Single %v for end %q", fmtRange(r), r.Single(), end)
		}
		// A non-empty range holds its own key.
		if !r.Empty() && !r.Contains(key) {
			t.Fatalf("%s does not hold its key", fmtRange(r))
		}
		// Two ranges share a key exactly when the larger of their first
		// keys is in both: every range here is an interval.
		first := key
		if bytes.Compare(key2, key) > 0 {
			first = key2
		}
		want := etcdContains(key, end, first) && etcdContains(key2, end2, first)
		if got := r.Overlaps(o); got != want {
			t.Fatalf("%s.Overlaps(%s) = %v, want %v", fmtRange(r), fmtRange(o), got, want)
		}
		if r.Overlaps(o) != o.Overlaps(r) {
			t.Fatalf("Overlaps is not symmetric for %s and %s", fmtRange(r), fmtRange(o))
		}
		// PrefixRange(p) holds exactly the keys starting with p.
		p := PrefixRange(key)
		for _, k := range [][]byte{probe, key, end, key2} {
			if got, want := p.Contains(k), bytes.HasPrefix(k, key); got != want {
				t.Fatalf("PrefixRange(%q).Contains(%q) = %v, want %v", key, k, got, want)
			}
		}
	})
}
