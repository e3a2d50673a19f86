package mvcc

import (
	"bytes"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func single(k string) KeyRange    { return KeyRange{Key: []byte(k)} }
func span(k, end string) KeyRange { return KeyRange{Key: []byte(k), End: []byte(end)} }
func fromKey(k string) KeyRange   { return KeyRange{Key: []byte(k), Unbounded: true} }

// fmtRange prints a range with its bytes quoted.
func fmtRange(r KeyRange) string {
	if r.Unbounded {
		return fmt.Sprintf("[%q, ∞)", r.Key)
	}
	if r.End == nil {
		return fmt.Sprintf("{%q}", r.Key)
	}
	return fmt.Sprintf("[%q, %q)", r.Key, r.End)
}

// sameRange compares ranges field by field, telling a nil End (one key)
// from an empty one.
func sameRange(a, b KeyRange) bool {
	return bytes.Equal(a.Key, b.Key) && bytes.Equal(a.End, b.End) && (a.End == nil) == (b.End == nil) && a.Unbounded == b.Unbounded
}

func TestNewKeyRange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key, end  []byte
		want      KeyRange
		single    bool
		empty     bool
		unbounded bool
	}{
		{name: "nil end is one key", key: []byte("a"), want: single("a"), single: true},
		{name: "empty end is one key", key: []byte("a"), end: []byte{}, want: single("a"), single: true},
		{name: `"\x00" is every key from key on`, key: []byte("a"), end: []byte{0}, want: fromKey("a"), unbounded: true},
		{name: `"\x00" from "\x00" is every key`, key: []byte{0}, end: []byte{0}, want: fromKey("\x00"), unbounded: true},
		{name: "end above key", key: []byte("a"), end: []byte("c"), want: span("a", "c")},
		{name: "end equal to key is empty", key: []byte("b"), end: []byte("b"), want: span("b", "b"), empty: true},
		{name: "end below key is empty", key: []byte("b"), end: []byte("a"), want: span("b", "a"), empty: true},
		// Only the one-byte "\x00" is special: a longer end is an ordinary
		// bound, below any key that does not start with NUL bytes.
		{name: `"\x00\x00" is an ordinary end`, key: []byte("a"), end: []byte{0, 0}, want: span("a", "\x00\x00"), empty: true},
		{name: "end one past the key is that key alone", key: []byte("a"), end: []byte("a\x00"), want: span("a", "a\x00")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NewKeyRange(tc.key, tc.end)
			if !sameRange(got, tc.want) {
				t.Fatalf("NewKeyRange(%q, %q) = %s, want %s", tc.key, tc.end, fmtRange(got), fmtRange(tc.want))
			}
			if got.Single() != tc.single || got.Empty() != tc.empty || got.Unbounded != tc.unbounded {
				t.Fatalf("%s: Single %v Empty %v Unbounded %v, want %v %v %v", fmtRange(got), got.Single(), got.Empty(), got.Unbounded, tc.single, tc.empty, tc.unbounded)
			}
		})
	}
}

func TestKeyRangeContains(t *testing.T) {
	for _, tc := range []struct {
		r   KeyRange
		in  []string
		out []string
	}{
		{r: single("b"), in: []string{"b"}, out: []string{"", "a", "b\x00", "ba", "c"}},
		{r: span("b", "d"), in: []string{"b", "b\x00", "c", "czzz"}, out: []string{"", "a", "az", "d", "d\x00", "e"}},
		{r: span("b", "b\x00"), in: []string{"b"}, out: []string{"a", "b\x00", "ba"}},
		{r: fromKey("b"), in: []string{"b", "c", "\xff\xff\xff"}, out: []string{"", "a", "azzz"}},
		{r: fromKey("\x00"), in: []string{"\x00", "a", "\xff"}, out: []string{""}},
		{r: span("d", "b"), out: []string{"a", "b", "c", "d", "e"}},
		{r: span("b", "b"), out: []string{"a", "b", "c"}},
	} {
		for _, k := range tc.in {
			if !tc.r.Contains([]byte(k)) {
				t.Errorf("%s does not contain %q", fmtRange(tc.r), k)
			}
		}
		for _, k := range tc.out {
			if tc.r.Contains([]byte(k)) {
				t.Errorf("%s contains %q", fmtRange(tc.r), k)
			}
		}
	}
}

func TestKeyRangeOverlaps(t *testing.T) {
	for _, tc := range []struct {
		a, b KeyRange
		want bool
	}{
		{single("a"), single("a"), true},
		{single("a"), single("b"), false},
		{single("a"), single("a\x00"), false},
		{single("a"), span("a", "c"), true},
		{single("b"), span("a", "c"), true},
		{single("c"), span("a", "c"), false}, // the end is exclusive
		{single("0"), span("a", "c"), false},
		{single("z"), fromKey("a"), true},
		{single("a"), fromKey("a"), true},
		{single("0"), fromKey("a"), false},
		{span("a", "c"), span("b", "d"), true},
		{span("a", "b"), span("b", "c"), false}, // touching, no shared key
		{span("a", "d"), span("b", "c"), true},  // one inside the other
		{span("a", "b"), span("c", "d"), false},
		{span("a", "c"), fromKey("c"), false},
		{span("a", "c"), fromKey("b"), true},
		{span("c", "d"), fromKey("a"), true},
		{fromKey("a"), fromKey("z"), true},
		// An empty range shares no key, whatever its bounds.
		{single("a"), span("b", "a"), false},
		{span("b", "a"), fromKey("0"), false},
		{span("b", "a"), span("0", "z"), false},
		{span("b", "b"), fromKey("a"), false},
		{span("b", "b"), span("b", "b"), false},
	} {
		if got := tc.a.Overlaps(tc.b); got != tc.want {
			t.Errorf("%s.Overlaps(%s) = %v, want %v", fmtRange(tc.a), fmtRange(tc.b), got, tc.want)
		}
		if got := tc.b.Overlaps(tc.a); got != tc.want {
			t.Errorf("%s.Overlaps(%s) = %v, want %v", fmtRange(tc.b), fmtRange(tc.a), got, tc.want)
		}
	}
}

func TestPrefixRange(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   KeyRange
		in     []string
		out    []string
	}{
		{prefix: "a", want: span("a", "b"), in: []string{"a", "a\x00", "azz", "a\xff\xff"}, out: []string{"", "`", "b", "ba"}},
		{prefix: "/registry/", want: span("/registry/", "/registry0"), in: []string{"/registry/pods/x"}, out: []string{"/registry", "/registry0", "/registryx"}},
		// Trailing 0xff bytes cannot be incremented: the byte before them is.
		{prefix: "a\xff", want: span("a\xff", "b"), in: []string{"a\xff", "a\xff\xff\x01"}, out: []string{"a", "a\xfe", "b"}},
		{prefix: "a\xffb", want: span("a\xffb", "a\xffc"), in: []string{"a\xffb", "a\xffbz"}, out: []string{"a\xffa", "a\xffc"}},
		{prefix: "a\xff\xff", want: span("a\xff\xff", "b"), in: []string{"a\xff\xff"}, out: []string{"a\xff", "b"}},
		// Only 0xff bytes, or nothing at all: no key bounds the range.
		{prefix: "\xff", want: fromKey("\xff"), in: []string{"\xff", "\xff\xff\xff"}, out: []string{"\xfe", "a"}},
		{prefix: "\xff\xff", want: fromKey("\xff\xff"), in: []string{"\xff\xff\x00"}, out: []string{"\xff"}},
		{prefix: "", want: fromKey(""), in: []string{"", "\x00", "a", "\xff\xff"}},
	} {
		p := []byte(tc.prefix)
		got := PrefixRange(p)
		if !sameRange(got, tc.want) {
			t.Errorf("PrefixRange(%q) = %s, want %s", tc.prefix, fmtRange(got), fmtRange(tc.want))
		}
		if string(p) != tc.prefix {
			t.Errorf("PrefixRange(%q) changed its argument to %q", tc.prefix, p)
		}
		for _, k := range tc.in {
			if !got.Contains([]byte(k)) {
				t.Errorf("PrefixRange(%q) does not contain %q", tc.prefix, k)
			}
		}
		for _, k := range tc.out {
			if got.Contains([]byte(k)) {
				t.Errorf("PrefixRange(%q) contains %q", tc.prefix, k)
			}
		}
		// The etcd client's WithPrefix names the same keys (it spells an
		// unbounded end "\x00", which NewKeyRange resolves).
		if tc.prefix != "" {
			if viaClient := NewKeyRange(p, []byte(clientv3.GetPrefixRangeEnd(tc.prefix))); !sameRange(viaClient, got) {
				t.Errorf("PrefixRange(%q) = %s, the etcd client's prefix range is %s", tc.prefix, fmtRange(got), fmtRange(viaClient))
			}
		}
	}
}
