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
	Rows        []Row
	Leases      []Lease
	Compact     int64
	RetainFloor int64
}

const segmentFormat = 1

// maxSegmentBytes bounds what a reader inflates from one segment: a
// corrupted length cannot make it allocate without bound.
const maxSegmentBytes = 1 << 30

// encode returns the segment's object body (gzip of its gob encoding) and
// the hex SHA-256 of the gob bytes, which its name carries.
func (d *Data) encode() (body []byte, sum string, err error) {
	var raw bytes.Buffer
	if err := gob.NewEncoder(&raw).Encode(d); err != nil {
		return nil, "", err
	}
	h := sha256.Sum256(raw.Bytes())
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return z.Bytes(), hex.EncodeToString(h[:]), nil
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
	if err := gob.NewDecoder(bytes.NewReader(raw)).Decode(&d); err != nil {
		return nil, fmt.Errorf("segment %s: %w", s.Name, err)
	}
	switch {
	case d.Format != segmentFormat:
		return nil, fmt.Errorf("segment %s has format %d, this quantykube reads %d", s.Name, d.Format, segmentFormat)
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
