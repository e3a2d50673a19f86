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
// frame by frame. And any other answer larger than maxPooled takes a buffer
// near its size, where gRPC's codec would take 1 MiB for one of up to 1
// MiB (marshalSized). Requests, and messages that are not protobuf v2
// (none of the services' are), go to gRPC's codec.
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
// 1.7-4.8x etcd's memory (docs/BENCHMARKS.md, "Issue 14, thirteenth
// round").
const maxPooled = 32 << 10

// largeAnswers holds the buffers of answers over maxPooled up to
// maxReused, in sizes a power of two apart (64, 128 and 256 KiB): such an
// answer holds less than twice its size, and its buffer is used again
// rather than left to the collector, which costs several times the
// encoding at these sizes. That is where the answers to a watcher that
// keeps up with a busy store fall (a group commit's events). A larger
// answer gets a buffer of its own size: kept in a pool, buffers of
// megabytes stayed with every stream that had once sent one
// (docs/BENCHMARKS.md, "Issue 14, thirteenth round").
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
	// minSharedValue is the smallest value sent from where it is held:
	// below it, a buffer of its own costs more than the copy.
	minSharedValue = 512
	// minSharedAnswer is the least those values must add up to for an
	// answer to be sent so.
	minSharedAnswer = 64 << 10
	// encodeChunk sizes the buffers that hold the rest of the encoding.
	encodeChunk = 32 << 10
)

func sharedValueBytes(r *pb.RangeResponse) int {
	n := 0
	for _, kv := range r.Kvs {
		if v := kv.GetValue(); len(v) >= minSharedValue {
			n += len(v)
		}
	}
	return n
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
	// buf is the unsent end of the current chunk: segments of it are
	// appended to out as values interrupt them.
	var buf []byte
	out = make(mem.BufferSlice, 0, 2*len(r.Kvs)+2)
	grow := func(n int) {
		if cap(buf)-len(buf) < n {
			if len(buf) > 0 {
				out = append(out, mem.SliceBuffer(buf))
			}
			buf = make([]byte, 0, max(encodeChunk, n))
		}
	}
	cut := func() {
		if len(buf) > 0 {
			out = append(out, mem.SliceBuffer(buf))
			buf = buf[len(buf):]
		}
	}
	if r.Header != nil {
		h, err := protov2.MarshalOptions{Deterministic: true}.Marshal(r.Header)
		if err != nil {
			return nil, false
		}
		grow(protowire.SizeTag(1) + protowire.SizeBytes(len(h)))
		buf = protowire.AppendTag(buf, 1, protowire.BytesType)
		buf = protowire.AppendBytes(buf, h)
	}
	for _, kv := range r.Kvs {
		if kv == nil || len(kv.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		size := kvSize(kv)
		// Everything of this entry but a shared value's bytes.
		grow(protowire.SizeTag(2) + protowire.SizeVarint(uint64(size)) + size - sharedLen(kv))
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(size))
		buf = appendBytesField(buf, 1, kv.Key)
		buf = appendVarintField(buf, 2, kv.CreateRevision)
		buf = appendVarintField(buf, 3, kv.ModRevision)
		buf = appendVarintField(buf, 4, kv.Version)
		if n := sharedLen(kv); n > 0 {
			buf = protowire.AppendTag(buf, 5, protowire.BytesType)
			buf = protowire.AppendVarint(buf, uint64(n))
			cut()
			out = append(out, mem.SliceBuffer(kv.Value))
		} else {
			buf = appendBytesField(buf, 5, kv.Value)
		}
		buf = appendVarintField(buf, 6, kv.Lease)
	}
	grow(2*protowire.SizeTag(4) + 1 + protowire.SizeVarint(uint64(r.Count)))
	if r.More {
		buf = protowire.AppendTag(buf, 3, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	buf = appendVarintField(buf, 4, r.Count)
	cut()
	return out, true
}

// sharedLen is the length of kv's value if it is sent as a buffer of its
// own, or 0.
func sharedLen(kv *mvccpb.KeyValue) int {
	if len(kv.Value) >= minSharedValue {
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
