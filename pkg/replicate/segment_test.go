package replicate

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// testData returns a segment of n revisions of one row each, values of
// valueSize random bytes, with a tombstone (NULL value) every tenth.
func testData(first int64, n, valueSize int) *Data {
	d := &Data{Format: segmentFormat, Lineage: "00000000000000aa", First: first, Last: first + int64(n) - 1,
		Leases: []Lease{{ID: 7, TTL: 60}}, Compact: first - 1, RetainFloor: 1}
	for i := range n {
		r := Row{Rev: first + int64(i), Key: fmt.Appendf(nil, "/registry/configmaps/default/cm-%d", i%50),
			CreateRev: first, Version: int64(i + 1), UnixMs: 1_700_000_000_000 + int64(i)}
		if i%10 == 9 {
			r.Deleted, r.ValueNull = true, true
		} else {
			r.Value = make([]byte, valueSize)
			for j := range r.Value {
				r.Value[j] = byte(rand.IntN(256))
			}
		}
		d.Rows = append(d.Rows, r)
	}
	return d
}

func segmentOf(d *Data, sum string) Segment {
	return Segment{Name: "segments/test", First: d.First, Last: d.Last, SHA256: sum}
}

// sameRows compares rows as a restore uses them: a NULL value is told by
// ValueNull, and gob gives an empty value back as nil.
func sameRows(t *testing.T, got, want []Row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !bytes.Equal(g.Value, w.Value) || !bytes.Equal(g.Key, w.Key) {
			t.Fatalf("row %d: key or value differs", i)
		}
		g.Key, g.Value, w.Key, w.Value = nil, nil, nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("row %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestEncoderRoundTrips: segments encoded one after another by one encoder
// (its buffers reused) decode to what was encoded, byte for byte what a
// fresh encoder writes, whether the segment is empty, smaller than a chunk
// or many chunks long.
func TestEncoderRoundTrips(t *testing.T) {
	var e encoder
	for _, d := range []*Data{testData(10, 400, 2048), testData(410, 3, 100), testData(413, 0, 0), testData(413, 1, 300_000), testData(414, 2000, 512)} {
		body, sum, err := e.encode(d)
		if err != nil {
			t.Fatal(err)
		}
		var fresh encoder
		fbody, fsum, err := fresh.encode(d)
		if err != nil {
			t.Fatal(err)
		}
		if sum != fsum || !bytes.Equal(body, fbody) {
			t.Fatalf("segment %d-%d: a reused encoder wrote other bytes than a fresh one", d.First, d.Last)
		}
		got, err := decodeSegment(bytes.NewReader(body), d.Lineage, segmentOf(d, sum))
		if err != nil {
			t.Fatalf("segment %d-%d: %v", d.First, d.Last, err)
		}
		if got.Format != segmentFormat || got.RowCount != len(d.Rows) || !reflect.DeepEqual(got.Leases, d.Leases) ||
			got.Compact != d.Compact || got.RetainFloor != d.RetainFloor {
			t.Fatalf("segment %d-%d: header %+v", d.First, d.Last, got)
		}
		sameRows(t, got.Rows, d.Rows)
	}
}

// TestEncoderAllocatesLittle: a steady second's segment (500 updates of
// 2 KiB, about 1 MB) is encoded into the encoder's kept buffers, allocating
// a fraction of its size; one gob value of the whole segment allocated
// five times its size (segment.go).
func TestEncoderAllocatesLittle(t *testing.T) {
	d := testData(1, 500, 2048)
	size := 0
	for _, r := range d.Rows {
		size += len(r.Key) + len(r.Value)
	}
	var e encoder
	if _, _, err := e.encode(d); err != nil {
		t.Fatal(err)
	}
	e.release()
	var before, after runtime.MemStats
	const n = 5
	runtime.ReadMemStats(&before)
	for range n {
		if _, _, err := e.encode(d); err != nil {
			t.Fatal(err)
		}
		e.release()
	}
	runtime.ReadMemStats(&after)
	per := int(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("a segment of %d bytes of keys and values: %d bytes allocated per encode", size, per)
	if per > size/2 {
		t.Errorf("encoding a segment of %d bytes allocated %d bytes, want at most half its size", size, per)
	}
}

// rawSegment gzips a gob stream of values as a segment body, returning it
// with the checksum its name would carry.
func rawSegment(t *testing.T, values ...any) ([]byte, string) {
	t.Helper()
	var raw, z bytes.Buffer
	enc := gob.NewEncoder(&raw)
	for _, v := range values {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	zw := gzip.NewWriter(&z)
	zw.Write(raw.Bytes())
	zw.Close()
	h := sha256.Sum256(raw.Bytes())
	return z.Bytes(), hex.EncodeToString(h[:])
}

// TestDecodeFormat1: segments written before format 2 (one Data with its
// rows) still restore.
func TestDecodeFormat1(t *testing.T) {
	d := testData(5, 30, 700)
	d.Format = 1
	body, sum := rawSegment(t, d)
	got, err := decodeSegment(bytes.NewReader(body), d.Lineage, segmentOf(d, sum))
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, got.Rows, d.Rows)
}

// TestDecodeRefusesMiscountedRows: a format 2 stream whose rows do not
// match its count, or that has rows inside its header, is refused naming
// the segment, even with a checksum that matches.
func TestDecodeRefusesMiscountedRows(t *testing.T) {
	d := testData(1, 6, 10)
	head := *d
	head.Rows, head.RowCount = nil, 6
	short := head
	short.RowCount = 7
	inside := *d
	inside.RowCount = 6
	unknown := head
	unknown.Format = 9
	for name, values := range map[string][]any{
		"fewer rows than counted":  {&short, d.Rows[:3], d.Rows[3:]},
		"more rows than counted":   {&head, d.Rows, d.Rows[:1]},
		"a chunk past the count":   {&head, d.Rows[:5], d.Rows[:2]},
		"rows inside the header":   {&inside, d.Rows},
		"an empty chunk":           {&head, d.Rows[:0], d.Rows},
		"a format from the future": {&unknown, d.Rows},
	} {
		body, sum := rawSegment(t, values...)
		_, err := decodeSegment(bytes.NewReader(body), d.Lineage, segmentOf(d, sum))
		if err == nil {
			t.Errorf("%s: decoded", name)
		} else if !strings.Contains(err.Error(), "segment segments/test") {
			t.Errorf("%s: error %q does not name the segment", name, err)
		}
	}
	body, sum := rawSegment(t, &head, d.Rows[:2], d.Rows[2:])
	if _, err := decodeSegment(bytes.NewReader(body), d.Lineage, segmentOf(d, sum)); err != nil {
		t.Errorf("rows in two chunks of any size: %v", err)
	}
}

// TestScratchLetsABacklogGo: the scratch keeps its memory for a segment
// of about the last one's size, lets a backlog's go once a smaller
// segment follows, and no row it keeps points into what it let go.
func TestScratchLetsABacklogGo(t *testing.T) {
	var sc scratch
	fill := func(rows, size int) {
		for i := range rows {
			start := len(sc.bytes)
			sc.bytes = append(sc.bytes, make([]byte, size)...)
			sc.rows = append(sc.rows, Row{Rev: int64(i), Key: sc.bytes[start : start+1], Value: sc.bytes[start+1:]})
		}
	}
	fill(4000, 1024) // a backlog
	sc.release()
	if cap(sc.bytes) < 4000*1024 || cap(sc.rows) < 4000 {
		t.Fatalf("a segment that filled the scratch let it go: %d bytes, %d rows kept", cap(sc.bytes), cap(sc.rows))
	}
	for i, r := range sc.rows[:cap(sc.rows)] {
		if r.Key != nil || r.Value != nil {
			t.Fatalf("row %d past the length still points into the last segment", i)
		}
	}
	fill(100, 1024) // a steady second after it
	sc.release()
	if cap(sc.bytes) != 0 || cap(sc.rows) != 0 {
		t.Fatalf("after a small segment the backlog's memory is kept: %d bytes, %d rows", cap(sc.bytes), cap(sc.rows))
	}
}
