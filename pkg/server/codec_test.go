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

// randomWatch is a watch answer of n events, some with prev_kv, with values
// of every size class, and the other fields set here and there.
func randomWatch(rnd *rand.Rand, n int) *pb.WatchResponse {
	r := &pb.WatchResponse{WatchId: rnd.Int64N(3) - 1, Fragment: rnd.IntN(4) == 0}
	if rnd.IntN(4) > 0 {
		r.Header = &pb.ResponseHeader{ClusterId: rnd.Uint64(), MemberId: rnd.Uint64(), Revision: rnd.Int64(), RaftTerm: rnd.Uint64N(3)}
	}
	r.Created, r.Canceled = rnd.IntN(16) == 0, rnd.IntN(16) == 0
	if rnd.IntN(8) == 0 {
		r.CompactRevision = rnd.Int64N(1<<40) - 1<<39
	}
	if rnd.IntN(16) == 0 {
		r.CancelReason = "a reason"
	}
	kvs := randomRange(rnd, 2*n).Kvs
	for i := range n {
		ev := &mvccpb.Event{Type: mvccpb.Event_EventType(rnd.IntN(2))}
		if rnd.IntN(16) > 0 {
			ev.Kv = kvs[2*i]
		}
		if rnd.IntN(2) == 0 {
			ev.PrevKv = kvs[2*i+1]
		}
		r.Events = append(r.Events, ev)
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
		out, want := encodeChecked(t, c, r, fmt.Sprintf("answer %d (%d entries)", i, len(r.Kvs)))
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
		shared += len(values)
		if n := copied(out, values); n > 0 {
			t.Fatalf("answer %d: %d large values were copied", i, n)
		}
	}
	if shared == 0 {
		t.Fatal("no answer was big enough to share its values")
	}
}

// The same for watch answers: proto.Marshal's bytes, and above maxReused
// every large value (prev_kv's too) sent from its own memory.
func TestCodecWatchAnswer(t *testing.T) {
	c := newCodec()
	rnd := rand.New(rand.NewPCG(7, 8))
	sharedAnswers := 0
	for i := range 300 {
		r := randomWatch(rnd, rnd.IntN(40))
		out, _ := encodeChecked(t, c, r, fmt.Sprintf("answer %d (%d events)", i, len(r.Events)))
		if !sharesWatch(r) || r.Created || r.Canceled || r.CancelReason != "" {
			continue
		}
		sharedAnswers++
		values := map[*byte]bool{}
		for _, ev := range r.Events {
			for _, kv := range []*mvccpb.KeyValue{ev.Kv, ev.PrevKv} {
				if sharedLen(kv, minSharedWatchValue) > 0 {
					values[unsafe.SliceData(kv.Value)] = true
				}
			}
		}
		if n := copied(out, values); n > 0 {
			t.Fatalf("answer %d: %d large values were copied", i, n)
		}
	}
	if sharedAnswers < 50 {
		t.Fatalf("%d answers of 300 took the shared encoding", sharedAnswers)
	}

	// Fields at their edges, each in an answer the shared encoding takes.
	big := bytes.Repeat([]byte("b"), 300<<10)
	kv := func() *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte("k"), Value: big, ModRevision: -3, Lease: -1}
	}
	same := kv()
	for name, evs := range map[string][]*mvccpb.Event{
		"an empty kv":          {{Kv: &mvccpb.KeyValue{}, PrevKv: kv()}},
		"an empty prev_kv":     {{Kv: kv(), PrevKv: &mvccpb.KeyValue{}}},
		"an empty event":       {{}, {Kv: kv()}},
		"types -5 and 7":       {{Type: -5, Kv: kv()}, {Type: 7, PrevKv: kv()}},
		"kv and prev_kv alike": {{Kv: same, PrevKv: same}},
		"a 3 MiB value":        {{Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 3<<20)}}},
	} {
		for _, h := range []*pb.ResponseHeader{nil, {}, {Revision: -1}} {
			r := &pb.WatchResponse{Header: h, WatchId: -2, CompactRevision: -7, Fragment: true, Events: evs}
			if !sharesWatch(r) {
				t.Fatalf("%s: the case does not take the shared encoding", name)
			}
			encodeChecked(t, c, r, fmt.Sprintf("%s, header %v", name, h))
		}
	}
}

// encodeChecked encodes m with c, and fails unless the bytes are
// proto.Marshal's, which it also returns.
func encodeChecked(t *testing.T, c codec, m proto.Message, what string) (mem.BufferSlice, []byte) {
	t.Helper()
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Materialize(); !bytes.Equal(got, want) {
		t.Fatalf("%s: encoded %d bytes, proto.Marshal %d", what, len(got), len(want))
	}
	return out, want
}

// copied is how many of values (by where their bytes are) out does not
// send from their own memory.
func copied(out mem.BufferSlice, values map[*byte]bool) int {
	sent := map[*byte]bool{}
	for _, b := range out {
		if p := unsafe.SliceData(b.ReadOnlyData()); values[p] {
			sent[p] = true
		}
	}
	return len(values) - len(sent)
}

// The encoder writes every field of the messages it encodes: a new field
// in etcd's API (a dependency upgrade) must fail here, not vanish from the
// answers.
func TestCodecKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		m      proto.Message
		fields []string
		// numbers are the fields' numbers, when they are not 1, 2, 3...
		numbers []int
	}{
		{m: &pb.RangeResponse{}, fields: []string{"header", "kvs", "more", "count"}},
		{m: &mvccpb.KeyValue{}, fields: []string{"key", "create_revision", "mod_revision", "version", "value", "lease"}},
		{m: &mvccpb.Event{}, fields: []string{"type", "kv", "prev_kv"}},
		{m: &pb.WatchResponse{}, fields: []string{"header", "watch_id", "created", "canceled", "compact_revision", "cancel_reason", "fragment", "events"},
			numbers: []int{1, 2, 3, 4, 5, 6, 7, 11}},
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
			num := i + 1
			if c.numbers != nil {
				num = c.numbers[i]
			}
			if fd := fds.ByName(protoreflect.Name(name)); fd == nil || int(fd.Number()) != num {
				t.Errorf("%T.%s is not field %d", c.m, name, num)
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
	w := randomWatch(rand.New(rand.NewPCG(9, 10)), 60)
	w.Events[5].Kv = &mvccpb.KeyValue{Key: []byte("k")}
	w.Events[5].Kv.ProtoReflect().SetUnknown([]byte{0xf8, 0x01, 0x01})
	wNil := randomWatch(rand.New(rand.NewPCG(11, 12)), 60)
	wNil.Events[3] = nil
	for _, m := range []*pb.WatchResponse{w, wNil} {
		if !sharesWatch(m) {
			t.Fatalf("a watch answer of %d shared bytes does not test the shared encoding", watchSharedBytes(m))
		}
	}
	for _, m := range []proto.Message{r, withNil, w, wNil, &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 5}}, &pb.TxnResponse{Succeeded: true}} {
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
// takes a buffer from gRPC's pool, as gRPC's codec does. A watch answer
// whose values take it above maxReused holds only the rest of its
// encoding: its values are the store's.
func TestCodecLargeAnswerHoldsNearItsSize(t *testing.T) {
	c := newCodec()
	value := bytes.Repeat([]byte("v"), 1000)
	// Every value its own, as the store's are.
	watchOf := func(events int, value []byte) proto.Message {
		r := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 1 << 20}, WatchId: 3}
		for i := range events {
			kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/pods/ns/p%06d", i), Value: bytes.Clone(value), ModRevision: int64(i + 2), Version: 2}
			prev := &mvccpb.KeyValue{Key: kv.Key, Value: bytes.Clone(value), ModRevision: int64(i + 1), Version: 1}
			r.Events = append(r.Events, &mvccpb.Event{Kv: kv, PrevKv: prev})
		}
		return r
	}
	watch := func(events int) proto.Message { return watchOf(events, value) }
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
		{"watch, 120 events: 240 KB, pooled", watch(120), true},
		{"watch, 400 events of 1000 bytes: a buffer of its own", watch(400), true},
		{"watch, 60 events of 8 KiB: values shared", watchOf(60, bytes.Repeat([]byte("w"), 8<<10)), true},
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
			values := map[*byte]bool{}
			if w, ok := tc.m.(*pb.WatchResponse); ok {
				for _, ev := range w.Events {
					values[unsafe.SliceData(ev.Kv.Value)] = true
					values[unsafe.SliceData(ev.PrevKv.Value)] = true
				}
			}
			held := heldBytes(out, values)
			if w, ok := tc.m.(*pb.WatchResponse); ok && sharesWatch(w) {
				rest := len(want) - watchSharedBytes(w)
				if held < rest || held >= rest+2*encodeChunk {
					t.Fatalf("%d bytes held for an answer of %d, %d of them values shared", held, len(want), watchSharedBytes(w))
				}
				return
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

// heldBytes is the memory out's buffers hold of their own: each backing
// array once (the segments of one chunk end where it ends), and none of
// the message's values, whose memory is the store's.
func heldBytes(out mem.BufferSlice, values map[*byte]bool) int {
	ends := map[uintptr]int{}
	for _, b := range out {
		d := b.ReadOnlyData()
		if values[unsafe.SliceData(d)] {
			continue
		}
		end := uintptr(unsafe.Pointer(unsafe.SliceData(d))) + uintptr(cap(d))
		ends[end] = max(ends[end], cap(d))
	}
	held := 0
	for _, n := range ends {
		held += n
	}
	return held
}

// BenchmarkCodecWatchBehind encodes the answer to a watcher 200 revisions
// behind, each event with its prev_kv, at two value sizes the codec
// shares: with values shared (the codec) and copied (marshalSized, which
// took every watch answer before).
func BenchmarkCodecWatchBehind(b *testing.B) {
	for _, size := range []int{minSharedWatchValue, 64 << 10} {
		value := bytes.Repeat([]byte("v"), size)
		r := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 1 << 20}, WatchId: 1}
		for i := range 200 {
			kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "/registry/pods/ns/p%06d", i), Value: value, CreateRevision: 5, ModRevision: int64(i + 1000), Version: 3}
			prev := &mvccpb.KeyValue{Key: kv.Key, Value: value, CreateRevision: 5, ModRevision: int64(i + 10), Version: 2}
			r.Events = append(r.Events, &mvccpb.Event{Kv: kv, PrevKv: prev})
		}
		for _, bc := range []struct {
			name    string
			marshal func() (mem.BufferSlice, error)
		}{
			{"shared", func() (mem.BufferSlice, error) { return newCodec().Marshal(r) }},
			{"copied", func() (mem.BufferSlice, error) { return marshalSized(r) }},
		} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, bc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					out, err := bc.marshal()
					if err != nil {
						b.Fatal(err)
					}
					out.Free()
				}
			})
		}
	}
}
