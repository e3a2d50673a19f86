package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protov2 "google.golang.org/protobuf/proto"
)

// codec encodes answers as gRPC's proto codec does (the bytes on the wire
// are proto.Marshal's), with two differences. A Range answer that carries
// many large values: gRPC would marshal it into one buffer as large as the
// answer and hold it until the client has read the last byte, so many
// concurrent lists of big objects each hold a copy of everything they
// list. Here such an answer is the values themselves, shared with the
// store (which never writes a value it has handed out), between small
// buffers holding the rest of the encoding; the transport copies them out
// frame by frame. A watch answer over maxReused that carries large values
// is sent so too (a watcher far behind on large objects). And any other
// answer larger than maxPooled takes a buffer near its size, where gRPC's
// codec would take 1 MiB for one of up to 1 MiB (marshalSized). Requests,
// and messages that are not protobuf v2 (none of the services' are), go to
// gRPC's codec.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2(proto.Name)} }

func (c codec) Name() string { return proto.Name }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*pb.RangeResponse); ok && sharedValueBytes(r) >= minSharedAnswer {
		if out, ok := marshalRange(r); ok {
			return out, nil
		}
	}
	if r, ok := v.(*pb.WatchResponse); ok && sharesWatch(r) {
		if out, ok := marshalWatch(r); ok {
			return out, nil
		}
	}
	if m, ok := v.(protov2.Message); ok {
		return marshalSized(m)
	}
	return c.proto.Marshal(v)
}

// maxPooled is the largest of gRPC's default buffer pool's sizes below its
// last, 1 MiB (google.golang.org/grpc/mem: 256 B, 4, 16 and 32 KiB, 1
// MiB). gRPC's codec takes the buffer of a message over 1 KiB from the
// smallest that holds it, so an answer over 32 KiB and up to 1 MiB holds
// 1 MiB (zeroed at every take) until the client has read it. Watch
// answers of a stream that fell behind are mostly that size: with a
// hundred watch streams under writes, those buffers took QuantyKube to
// 1.7-4.8x etcd's memory (docs/benchmarks/watch-memory.md).
const maxPooled = 32 << 10

// largeAnswers holds the buffers of answers over maxPooled up to
// maxReused, in sizes a power of two apart (64, 128 and 256 KiB): such an
// answer holds less than twice its size, and its buffer is used again
// rather than left to the collector, which costs several times the
// encoding at these sizes. That is where the answers to a watcher that
// keeps up with a busy store fall (a group commit's events). A larger
// answer gets a buffer of its own size: kept in a pool, buffers of
// megabytes stayed with every stream that had once sent one
// (docs/benchmarks/watch-memory.md).
var largeAnswers = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(16, 17, 18)
	if err != nil {
		panic(err)
	}
	return p
}()

const maxReused = 256 << 10

// marshalSized encodes m as gRPC's codec does, but for a message larger
// than maxPooled, for which gRPC's codec would hold 1 MiB (up to 1 MiB):
// it takes its buffer from largeAnswers, or above maxReused one of its
// own size.
func marshalSized(m protov2.Message) (mem.BufferSlice, error) {
	size := protov2.Size(m)
	// Size has just been computed, and an answer is not changed while it
	// is sent.
	opts := protov2.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) || size > maxReused {
		b, err := opts.MarshalAppend(make([]byte, 0, size), m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	if size > maxPooled {
		pool = largeAnswers
	}
	buf := pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

const (
	// minSharedValue is the smallest value of a Range answer sent from
	// where it is held: below it, a buffer of its own costs more than the
	// copy.
	minSharedValue = 512
	// minSharedWatchValue is minSharedValue for watch answers. With 1 KiB
	// values (the watchers workload) two A/B runs of sharing from 512
	// bytes on gave puts at 0.95x both times, against no gain in memory;
	// from 4 KiB on, values that small are copied as before.
	minSharedWatchValue = 4 << 10
	// minSharedAnswer is the least those values must add up to for an
	// answer to be sent so.
	minSharedAnswer = 64 << 10
	// encodeChunk sizes the buffers that hold the rest of the encoding.
	encodeChunk = 32 << 10
)

func sharedValueBytes(r *pb.RangeResponse) int {
	n := 0
	for _, kv := range r.Kvs {
		n += sharedLen(kv, minSharedValue)
	}
	return n
}

// sharedEncoder writes a message as proto.Marshal does, into out: small
// buffers holding the encoding but for values of minSharedValue bytes or
// more, which are buffers of their own that share the value's memory.
type sharedEncoder struct {
	// buf is the unsent end of the current chunk: segments of it are
	// appended to out as values interrupt them.
	buf []byte
	out mem.BufferSlice
	// min is the smallest value shared (minSharedValue or
	// minSharedWatchValue).
	min int
}

// grow makes room for n more bytes of encoding in buf.
func (e *sharedEncoder) grow(n int) {
	if cap(e.buf)-len(e.buf) < n {
		if len(e.buf) > 0 {
			e.out = append(e.out, mem.SliceBuffer(e.buf))
		}
		e.buf = make([]byte, 0, max(encodeChunk, n))
	}
}

// cut ends the current segment of buf.
func (e *sharedEncoder) cut() {
	if len(e.buf) > 0 {
		e.out = append(e.out, mem.SliceBuffer(e.buf))
		e.buf = e.buf[len(e.buf):]
	}
}

// header writes h as field 1, as the answers' headers are.
func (e *sharedEncoder) header(h *pb.ResponseHeader) bool {
	if h == nil {
		return true
	}
	b, err := protov2.MarshalOptions{Deterministic: true}.Marshal(h)
	if err != nil {
		return false
	}
	e.grow(protowire.SizeTag(1) + protowire.SizeBytes(len(b)))
	e.buf = protowire.AppendTag(e.buf, 1, protowire.BytesType)
	e.buf = protowire.AppendBytes(e.buf, b)
	return true
}

// keyValue writes kv as field num; false when kv holds unknown fields.
func (e *sharedEncoder) keyValue(num protowire.Number, kv *mvccpb.KeyValue) bool {
	if len(kv.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	size := kvSize(kv)
	// Everything of this entry but a shared value's bytes.
	e.grow(protowire.SizeTag(num) + protowire.SizeVarint(uint64(size)) + size - sharedLen(kv, e.min))
	e.buf = protowire.AppendTag(e.buf, num, protowire.BytesType)
	e.buf = protowire.AppendVarint(e.buf, uint64(size))
	e.buf = appendBytesField(e.buf, 1, kv.Key)
	e.buf = appendVarintField(e.buf, 2, kv.CreateRevision)
	e.buf = appendVarintField(e.buf, 3, kv.ModRevision)
	e.buf = appendVarintField(e.buf, 4, kv.Version)
	if n := sharedLen(kv, e.min); n > 0 {
		e.buf = protowire.AppendTag(e.buf, 5, protowire.BytesType)
		e.buf = protowire.AppendVarint(e.buf, uint64(n))
		e.cut()
		e.out = append(e.out, mem.SliceBuffer(kv.Value))
	} else {
		e.buf = appendBytesField(e.buf, 5, kv.Value)
	}
	e.buf = appendVarintField(e.buf, 6, kv.Lease)
	return true
}

// marshalRange encodes r as proto.Marshal does (fields in number order,
// zero values left out; TestCodecKnowsEveryField holds it to the messages'
// fields), with values of minSharedValue bytes or more as
// buffers of their own that share the value's memory. ok is false when r
// holds what this encoder does not write (unknown fields, nil entries).
func marshalRange(r *pb.RangeResponse) (out mem.BufferSlice, ok bool) {
	if len(r.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	e := &sharedEncoder{out: make(mem.BufferSlice, 0, 2*len(r.Kvs)+2), min: minSharedValue}
	if !e.header(r.Header) {
		return nil, false
	}
	for _, kv := range r.Kvs {
		if kv == nil || !e.keyValue(2, kv) {
			return nil, false
		}
	}
	e.grow(2*protowire.SizeTag(4) + 1 + protowire.SizeVarint(uint64(r.Count)))
	if r.More {
		e.buf = protowire.AppendTag(e.buf, 3, protowire.VarintType)
		e.buf = protowire.AppendVarint(e.buf, 1)
	}
	e.buf = appendVarintField(e.buf, 4, r.Count)
	e.cut()
	return e.out, true
}

// sharesWatch says whether r's large values are sent from the store's
// memory: when they add up to minSharedAnswer and the answer is over
// maxReused. Up to maxReused, marshalSized's pooled buffer leaves the
// collector nothing, where the shared encoding leaves it a few small
// buffers per event, and a watcher that keeps up with a busy store gets
// such answers all the time.
func sharesWatch(r *pb.WatchResponse) bool {
	return watchSharedBytes(r) >= minSharedAnswer && protov2.Size(r) > maxReused
}

// watchSharedBytes is what r's events' values of minSharedWatchValue bytes
// or more add up to, prev_kv included.
func watchSharedBytes(r *pb.WatchResponse) int {
	n := 0
	for _, ev := range r.Events {
		if ev != nil {
			n += sharedLen(ev.Kv, minSharedWatchValue) + sharedLen(ev.PrevKv, minSharedWatchValue)
		}
	}
	return n
}

// marshalWatch is marshalRange for a watch answer: its events' values (and
// their prev_kv's) are sent from where the store holds them, in the ring or
// read back from the log, not copied into the answer.
func marshalWatch(r *pb.WatchResponse) (out mem.BufferSlice, ok bool) {
	// Created and canceled answers carry no events: they, and a
	// cancel_reason that proto.Marshal would check as UTF-8, are left to
	// marshalSized.
	if len(r.ProtoReflect().GetUnknown()) > 0 || r.Created || r.Canceled || r.CancelReason != "" {
		return nil, false
	}
	e := &sharedEncoder{out: make(mem.BufferSlice, 0, 4*len(r.Events)+2), min: minSharedWatchValue}
	if !e.header(r.Header) {
		return nil, false
	}
	e.grow(3 * (1 + protowire.SizeVarint(1<<63)))
	e.buf = appendVarintField(e.buf, 2, r.WatchId)
	e.buf = appendVarintField(e.buf, 5, r.CompactRevision)
	e.buf = appendBoolField(e.buf, 7, r.Fragment)
	for _, ev := range r.Events {
		if ev == nil || len(ev.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		size := varintFieldSize(int64(ev.Type))
		if ev.Kv != nil {
			size += messageFieldSize(2, kvSize(ev.Kv))
		}
		if ev.PrevKv != nil {
			size += messageFieldSize(3, kvSize(ev.PrevKv))
		}
		e.grow(protowire.SizeTag(11) + protowire.SizeVarint(uint64(size)) + varintFieldSize(int64(ev.Type)))
		e.buf = protowire.AppendTag(e.buf, 11, protowire.BytesType)
		e.buf = protowire.AppendVarint(e.buf, uint64(size))
		e.buf = appendVarintField(e.buf, 1, int64(ev.Type))
		if ev.Kv != nil && !e.keyValue(2, ev.Kv) {
			return nil, false
		}
		if ev.PrevKv != nil && !e.keyValue(3, ev.PrevKv) {
			return nil, false
		}
	}
	e.cut()
	return e.out, true
}

// messageFieldSize is the size of a message field numbered below 16 whose
// message is size bytes.
func messageFieldSize(num protowire.Number, size int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(size)
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

// sharedLen is the length of kv's value if it is sent as a buffer of its
// own, values of min bytes or more being shared, or 0 (also for no kv).
func sharedLen(kv *mvccpb.KeyValue, min int) int {
	if kv != nil && len(kv.Value) >= min {
		return len(kv.Value)
	}
	return 0
}

func kvSize(kv *mvccpb.KeyValue) int {
	n := 0
	if len(kv.Key) > 0 {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(kv.Key))
	}
	n += varintFieldSize(kv.CreateRevision) + varintFieldSize(kv.ModRevision) + varintFieldSize(kv.Version) + varintFieldSize(kv.Lease)
	if len(kv.Value) > 0 {
		n += protowire.SizeTag(5) + protowire.SizeBytes(len(kv.Value))
	}
	return n
}

// varintFieldSize is the size of an int64 field numbered below 16.
func varintFieldSize(v int64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(v))
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarintField(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}
