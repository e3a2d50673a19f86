package replicate

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// Row is one log row, exactly as the log holds it.
type Row struct {
	Rev, Sub  int64
	Key       []byte
	Value     []byte
	ValueNull bool // gob sends nil and empty alike
	CreateRev int64
	Version   int64
	Lease     int64
	Deleted   bool
	UnixMs    int64
}

// Lease is one row of the leases table.
type Lease struct{ ID, TTL int64 }

// Data is a segment's content: the log rows of revisions First..Last and
// what else the store held at Last that the log does not say (its leases,
// the etcd API's compaction floor and the retention floor).
type Data struct {
	Format      int
	Lineage     string
	First, Last int64
	Rows        []Row // in format 1 only: format 2 sends them after Data
	Leases      []Lease
	Compact     int64
	RetainFloor int64
	RowCount    int // format 2: how many rows follow Data
}

// A segment's content is a gob stream, gzip'd. Format 1 is one Data with
// its rows. Format 2, which this quantykube writes, is Data without rows,
// then the rows as []Row values of about chunkBytes of keys and values
// each: gob builds each value whole in a buffer that grows by a quarter
// at a time, so one value of a whole segment allocated five times the
// segment's size every second, and chunks bound that by chunkBytes.
const (
	segmentFormat = 2
	chunkBytes    = 64 << 10
)

// maxSegmentBytes bounds what a reader inflates from one segment: a
// corrupted length cannot make it allocate without bound.
const maxSegmentBytes = 1 << 30

// encoder turns segments into object bodies. It keeps its gzip writer
// and its output buffer from one segment to the next, and gob writes
// through the checksum straight into gzip: the replicator ships a segment
// a second, and allocating these afresh for each (about 3 MB a second at
// 500 updates/s) woke the garbage collector often enough to double write
// p99 (docs/benchmarks/replication-cost.md).
type encoder struct {
	z  bytes.Buffer
	zw *gzip.Writer
}

// encode returns the segment's object body (gzip of its gob encoding) and
// the hex SHA-256 of the gob bytes, which its name carries. The body is
// the encoder's: it is valid until release.
func (e *encoder) encode(d *Data) (body []byte, sum string, err error) {
	e.z.Reset()
	if e.zw == nil {
		e.zw, _ = gzip.NewWriterLevel(&e.z, gzip.BestSpeed)
	} else {
		e.zw.Reset(&e.z)
	}
	h := sha256.New()
	ge := gob.NewEncoder(io.MultiWriter(h, e.zw))
	head := *d
	head.Format, head.Rows, head.RowCount = segmentFormat, nil, len(d.Rows)
	if err := ge.Encode(&head); err != nil {
		return nil, "", err
	}
	for rows := d.Rows; len(rows) > 0; {
		n, size := 0, 0
		for n < len(rows) && (n == 0 || size < chunkBytes) {
			size += len(rows[n].Key) + len(rows[n].Value)
			n++
		}
		if err := ge.Encode(rows[:n]); err != nil {
			return nil, "", err
		}
		rows = rows[n:]
	}
	if err := e.zw.Close(); err != nil {
		return nil, "", err
	}
	return e.z.Bytes(), hex.EncodeToString(h.Sum(nil)), nil
}

// release ends the use of the last body. Its buffer is kept for the next
// only where that body filled at least half of it (see scratch.release).
func (e *encoder) release() {
	if e.z.Cap() > 2*e.z.Len() {
		e.z = bytes.Buffer{}
	}
	e.z.Reset()
}

// decodeSegment reads segment s's body from r and checks it against its
// name: the checksum, the lineage and the revisions.
func decodeSegment(r io.Reader, lineage string, s Segment) (*Data, error) {
	zr, err := gunzip(r, "segment "+s.Name)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxSegmentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("segment %s is truncated or corrupted: %w", s.Name, err)
	}
	if len(raw) > maxSegmentBytes {
		return nil, fmt.Errorf("segment %s inflates past %d bytes", s.Name, maxSegmentBytes)
	}
	if h := sha256.Sum256(raw); hex.EncodeToString(h[:]) != s.SHA256 {
		return nil, fmt.Errorf("segment %s: checksum mismatch: its content is not what was written", s.Name)
	}
	var d Data
	dec := gob.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("segment %s: %w", s.Name, err)
	}
	switch d.Format {
	case 1:
	case 2:
		if err := decodeRows(dec, &d, len(raw)); err != nil {
			return nil, fmt.Errorf("segment %s: %w", s.Name, err)
		}
	default:
		return nil, fmt.Errorf("segment %s has format %d, this quantykube reads 1 to %d", s.Name, d.Format, segmentFormat)
	}
	switch {
	case d.Lineage != lineage:
		return nil, fmt.Errorf("segment %s belongs to lineage %s, not %s", s.Name, d.Lineage, lineage)
	case d.First != s.First || d.Last != s.Last:
		return nil, fmt.Errorf("segment %s holds revisions %d-%d, not those its name says", s.Name, d.First, d.Last)
	}
	prev := d.First - 1
	for _, row := range d.Rows {
		if row.Rev < prev || row.Rev > d.Last {
			return nil, errors.New("segment " + s.Name + ": rows out of order or outside its revisions")
		}
		prev = row.Rev
	}
	return &d, nil
}

// decodeRows reads format 2's rows, which follow d in dec's stream of
// size bytes: exactly d.RowCount of them, then the stream's end.
func decodeRows(dec *gob.Decoder, d *Data, size int) error {
	if len(d.Rows) != 0 || d.RowCount < 0 || d.RowCount > size {
		return fmt.Errorf("format 2 with %d rows inside and a count of %d", len(d.Rows), d.RowCount)
	}
	d.Rows = make([]Row, 0, d.RowCount)
	for len(d.Rows) < d.RowCount {
		var chunk []Row
		if err := dec.Decode(&chunk); err != nil {
			return fmt.Errorf("%d of %d rows read: %w", len(d.Rows), d.RowCount, err)
		}
		if len(chunk) == 0 || len(chunk) > d.RowCount-len(d.Rows) {
			return fmt.Errorf("%d of %d rows read, then a chunk of %d", len(d.Rows), d.RowCount, len(chunk))
		}
		d.Rows = append(d.Rows, chunk...)
	}
	var extra []Row
	if err := dec.Decode(&extra); err != io.EOF {
		return fmt.Errorf("more than the %d rows it counts", d.RowCount)
	}
	return nil
}

// gunzip opens a gzip stream; what is not gzip is named, and an object
// encrypted by the object store's client side is told apart.
func gunzip(r io.Reader, what string) (*gzip.Reader, error) {
	br := bufio.NewReader(r)
	if head, _ := br.Peek(4); string(head) == "QKOS" {
		return nil, fmt.Errorf("%s is encrypted: give the key it was written with (--encryption-key-file)", what)
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("%s: not gzip: %w", what, err)
	}
	return zr, nil
}
