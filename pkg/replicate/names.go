// Package replicate streams a SQLite store to object storage (bases and
// segments of committed revisions) and rebuilds a store from them at any
// revision kept (ADR-044).
package replicate

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/quantyroot/quantykube/pkg/replicate/objstore"
)

// Object names, zero-padded so that a listing sorts by revision:
//
//	LINEAGE/bases/REV-UNIXMS-SHA256.db.gz
//	LINEAGE/segments/FIRST-LAST-T0-T1-SHA256.seg.gz
//
// A base is the store at REV (its last commit at UNIXMS); a segment holds
// revisions FIRST..LAST, committed from T0 to T1 (unix ms). SHA256 is the
// hex digest of the object's content before compression.
const (
	basesDir    = "bases/"
	segmentsDir = "segments/"
	baseExt     = ".db.gz"
	segmentExt  = ".seg.gz"
)

// Base is a base object, parsed from its name.
type Base struct {
	Name   string
	Rev    int64
	UnixMs int64
	SHA256 string
	Size   int64
}

// Segment is a segment object, parsed from its name.
type Segment struct {
	Name        string
	First, Last int64
	T0, T1      int64
	SHA256      string
	Size        int64
}

// NewLineage returns a random lineage id: 16 hex digits, stored in the
// store's meta as its int64 value.
func NewLineage() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	// Positive, so it reads the same as a signed BIGINT and is never 0
	// (0 is "none").
	return int64(binary.BigEndian.Uint64(b[:])>>1) | 1, nil
}

// LineageString formats a lineage id as it appears in object names.
func LineageString(id int64) string { return fmt.Sprintf("%016x", uint64(id)) }

func baseName(lineage string, rev, unixMs int64, sum string) string {
	return fmt.Sprintf("%s/%s%020d-%016d-%s%s", lineage, basesDir, rev, unixMs, sum, baseExt)
}

func segmentName(lineage string, first, last, t0, t1 int64, sum string) string {
	return fmt.Sprintf("%s/%s%020d-%020d-%016d-%016d-%s%s", lineage, segmentsDir, first, last, t0, t1, sum, segmentExt)
}

// Listing is what a bucket holds of one lineage, each list by revision.
type Listing struct {
	Lineage  string
	Bases    []Base
	Segments []Segment
}

// listError is a listing the object store failed to give (down,
// unreachable, refusing), as opposed to one that holds what is not a
// replica: the first may pass, the second will not.
type listError struct{ err error }

func (e listError) Error() string { return e.err.Error() }
func (e listError) Unwrap() error { return e.err }

// List reads the bucket: its one lineage (none when empty) and that
// lineage's bases and segments. A bucket holding more than one lineage, or
// objects QuantyKube did not name, is an error naming them.
func List(ctx context.Context, st objstore.Store) (Listing, error) {
	objs, err := st.List(ctx, "")
	if err != nil {
		return Listing{}, listError{fmt.Errorf("list %s: %w", st, err)}
	}
	var l Listing
	for _, o := range objs {
		lineage, rest, ok := strings.Cut(o.Name, "/")
		if !ok {
			return l, fmt.Errorf("%s: object %q is not QuantyKube's replica: give a prefix of its own", st, o.Name)
		}
		if l.Lineage == "" {
			l.Lineage = lineage
		} else if lineage != l.Lineage {
			return l, fmt.Errorf("%s holds two lineages, %s and %s: a bucket prefix holds one store's replica", st, l.Lineage, lineage)
		}
		switch {
		case strings.HasPrefix(rest, basesDir):
			b, err := parseBase(strings.TrimPrefix(rest, basesDir))
			if err != nil {
				return l, fmt.Errorf("%s: object %q: %w", st, o.Name, err)
			}
			b.Name, b.Size = o.Name, o.Size
			l.Bases = append(l.Bases, b)
		case strings.HasPrefix(rest, segmentsDir):
			s, err := parseSegment(strings.TrimPrefix(rest, segmentsDir))
			if err != nil {
				return l, fmt.Errorf("%s: object %q: %w", st, o.Name, err)
			}
			s.Name, s.Size = o.Name, o.Size
			l.Segments = append(l.Segments, s)
		default:
			return l, fmt.Errorf("%s: object %q is not QuantyKube's replica", st, o.Name)
		}
	}
	sort.Slice(l.Bases, func(i, j int) bool { return l.Bases[i].Rev < l.Bases[j].Rev })
	sort.Slice(l.Segments, func(i, j int) bool { return l.Segments[i].First < l.Segments[j].First })
	return l, nil
}

func parseBase(s string) (Base, error) {
	f, ok := fields(s, baseExt, 3)
	if !ok {
		return Base{}, fmt.Errorf("not a base name (REV-UNIXMS-SHA256%s)", baseExt)
	}
	rev, err1 := strconv.ParseInt(f[0], 10, 64)
	ms, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || len(f[2]) != 64 {
		return Base{}, fmt.Errorf("not a base name (REV-UNIXMS-SHA256%s)", baseExt)
	}
	return Base{Rev: rev, UnixMs: ms, SHA256: f[2]}, nil
}

func parseSegment(s string) (Segment, error) {
	f, ok := fields(s, segmentExt, 5)
	bad := fmt.Errorf("not a segment name (FIRST-LAST-T0-T1-SHA256%s)", segmentExt)
	if !ok || len(f[4]) != 64 {
		return Segment{}, bad
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return Segment{}, bad
		}
		n[i] = v
	}
	if n[0] > n[1] || n[0] < 1 {
		return Segment{}, fmt.Errorf("revisions %d-%d: not a range", n[0], n[1])
	}
	return Segment{First: n[0], Last: n[1], T0: n[2], T1: n[3], SHA256: f[4]}, nil
}

func fields(s, ext string, n int) ([]string, bool) {
	s, ok := strings.CutSuffix(s, ext)
	if !ok {
		return nil, false
	}
	f := strings.Split(s, "-")
	return f, len(f) == n
}
