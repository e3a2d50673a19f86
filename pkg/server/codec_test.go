package server

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// randomRange is a Range answer of n entries with values of every size
// class the codec treats apart, and zero fields here and there.
func randomRange(rnd *rand.Rand, n int) *pb.RangeResponse {
	r := &pb.RangeResponse{More: rnd.IntN(2) == 0, Count: rnd.Int64N(1 << 40)}
	if rnd.IntN(4) > 0 {
		r.Header = &pb.ResponseHeader{ClusterId: rnd.Uint64(), MemberId: rnd.Uint64(), Revision: rnd.Int64(), RaftTerm: rnd.Uint64N(3)}
	}
	for i := range n {
		kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/pods/ns/p%06d", i)}
		if rnd.IntN(8) > 0 {
			kv.CreateRevision, kv.ModRevision, kv.Version = rnd.Int64N(1<<33), rnd.Int64N(1<<33), rnd.Int64N(100)
		}
		if rnd.IntN(4) == 0 {
			kv.Lease = rnd.Int64()
		}
		switch rnd.IntN(4) {
		case 0: // no value (keys_only)
		case 1:
			kv.Value = bytes.Repeat([]byte{byte(i)}, rnd.IntN(minSharedValue))
		default:
			kv.Value = bytes.Repeat([]byte{byte(i)}, minSharedValue+rnd.IntN(64<<10))
		}
		r.Kvs = append(r.Kvs, kv)
	}
	return r
}

// The codec writes proto.Marshal's bytes for every answer, and a big
// answer's large values are not copied: the buffers it returns share their
// memory.
func TestCodecRangeAnswer(t *testing.T) {
	c := newCodec()
	rnd := rand.New(rand.NewPCG(1, 2))
	shared := 0
	for i := range 300 {
		r := randomRange(rnd, rnd.IntN(200))
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("answer %d (%d entries): encoded %d bytes, proto.Marshal %d", i, len(r.Kvs), len(got), len(want))
		}
		back := &pb.RangeResponse{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, back); err != nil || !proto.Equal(back, r) {
			t.Fatalf("answer %d does not read back: %v", i, err)
		}
		if sharedValueBytes(r) < minSharedAnswer {
			continue
		}
		values := map[*byte]bool{}
		for _, kv := range r.Kvs {
			if len(kv.Value) >= minSharedValue {
				values[unsafe.SliceData(kv.Value)] = true
			}
		}
		for _, b := range out {
			if values[unsafe.SliceData(b.ReadOnlyData())] {
				shared++
				delete(values, unsafe.SliceData(b.ReadOnlyData()))
			}
		}
		if len(values) > 0 {
			t.Fatalf("answer %d: %d large values were copied", i, len(values))
		}
	}
	if shared == 0 {
		t.Fatal("no answer was big enough to share its values")
	}
}

// The encoder writes every field of the messages it encodes: a new field
// in etcd's API (a dependency upgrade) must fail here, not vanish from the
// answers.
func TestCodecKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		m      proto.Message
		fields []string
	}{
		{&pb.RangeResponse{}, []string{"header", "kvs", "more", "count"}},
		{&mvccpb.KeyValue{}, []string{"key", "create_revision", "mod_revision", "version", "value", "lease"}},
	} {
		fds := c.m.ProtoReflect().Descriptor().Fields()
		var names []string
		for i := range fds.Len() {
			names = append(names, string(fds.Get(i).Name()))
		}
		if fmt.Sprint(names) != fmt.Sprint(c.fields) {
			t.Errorf("%T has fields %v; the codec writes %v", c.m, names, c.fields)
		}
		for i, name := range c.fields {
			if fd := fds.ByName(protoreflect.Name(name)); fd == nil || int(fd.Number()) != i+1 {
				t.Errorf("%T.%s is not field %d", c.m, name, i+1)
			}
		}
	}
}

// Other messages, and Range answers the shared encoding does not know
// (unknown fields, a nil entry), are encoded exactly as gRPC's proto codec
// encodes them.
func TestCodecOtherMessages(t *testing.T) {
	c := newCodec()
	r := randomRange(rand.New(rand.NewPCG(3, 4)), 300)
	r.Kvs[7].ProtoReflect().SetUnknown([]byte{0xf8, 0x01, 0x01}) // field 31, varint 1
	withNil := randomRange(rand.New(rand.NewPCG(5, 6)), 300)
	withNil.Kvs[3] = nil
	for _, m := range []proto.Message{r, withNil, &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 5}}, &pb.TxnResponse{Succeeded: true}} {
		want, err := c.proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Fatalf("%T: encoded differently from the proto codec", m)
		}
	}
}

// BenchmarkCodecList10k encodes the answer of a list of 10,000 objects of
// 1 KiB (make bench's 10k-of-100k list), with this codec and with gRPC's.
func BenchmarkCodecList10k(b *testing.B) {
	r := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 1 << 20}, Count: 100_000, More: true}
	value := bytes.Repeat([]byte("v"), 1024)
	for i := range 10_000 {
		r.Kvs = append(r.Kvs, &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/bench-list100k/k%06d", i), Value: value, CreateRevision: int64(i + 1), ModRevision: int64(i + 1), Version: 1})
	}
	c := newCodec()
	for _, bc := range []struct {
		name  string
		codec interface {
			Marshal(any) (mem.BufferSlice, error)
		}
	}{{"shared", c}, {"proto", c.proto}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := bc.codec.Marshal(r)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}

// An answer larger than maxPooled is encoded as proto.Marshal encodes it,
// into a buffer less than twice its size, and above maxReused exactly its
// size: gRPC's pool would hold 1 MiB for it. One at or below maxPooled
// takes a buffer from gRPC's pool, as gRPC's codec does.
func TestCodecLargeAnswerHoldsNearItsSize(t *testing.T) {
	c := newCodec()
	value := bytes.Repeat([]byte("v"), 1000)
	watch := func(events int) proto.Message {
		r := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 1 << 20}, WatchId: 3}
		for i := range events {
			kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/pods/ns/p%06d", i), Value: value, ModRevision: int64(i + 2), Version: 2}
			prev := &mvccpb.KeyValue{Key: kv.Key, Value: value, ModRevision: int64(i + 1), Version: 1}
			r.Events = append(r.Events, &mvccpb.Event{Kv: kv, PrevKv: prev})
		}
		return r
	}
	// Values under minSharedValue: a Range answer the shared encoding leaves alone.
	small := bytes.Repeat([]byte("s"), minSharedValue-1)
	rng := &pb.RangeResponse{Count: 200}
	for i := range 200 {
		rng.Kvs = append(rng.Kvs, &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%d", i), Value: small})
	}
	txn := &pb.TxnResponse{Succeeded: true, Responses: []*pb.ResponseOp{{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{PrevKv: &mvccpb.KeyValue{Key: []byte("k"), Value: bytes.Repeat([]byte("p"), 200<<10)}}}}}}
	for _, tc := range []struct {
		name  string
		m     proto.Message
		large bool
	}{
		{"watch, 15 events", watch(15), false},
		{"watch, 17 events", watch(17), true},
		{"watch, 400 events", watch(400), true},
		{"range of small values", rng, true},
		{"txn with a large prev_kv", txn, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := proto.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if tc.large != (len(want) > maxPooled) {
				t.Fatalf("the case is %d bytes: fix the case", len(want))
			}
			out, err := c.Marshal(tc.m)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Free()
			if got := out.Materialize(); !bytes.Equal(got, want) {
				t.Fatalf("encoded %d bytes unlike proto.Marshal's %d", len(got), len(want))
			}
			held := 0
			for _, b := range out {
				held += cap(b.ReadOnlyData())
			}
			if tc.large && (held < len(want) || held >= 2*len(want)) {
				t.Fatalf("%d bytes held for an answer of %d", held, len(want))
			}
			if len(want) > maxReused && held != len(want) {
				t.Fatalf("%d bytes held for an answer of %d: above maxReused an answer's buffer is its own", held, len(want))
			}
			if !tc.large && held > maxPooled {
				t.Fatalf("%d bytes held for an answer of %d", held, len(want))
			}
		})
	}
}
