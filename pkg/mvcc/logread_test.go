package mvcc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// A watcher far behind reads the log in pieces of about LogReadBytes,
// each ending on a whole revision (one larger than the bound read whole),
// and the pieces together are exactly the events one unbounded read
// returns. The ring, whose events are in memory already, answers whole.
func TestEventsFromTheLogInBoundedPieces(t *testing.T) {
	const bound = 5000
	ctx := context.Background()
	bounded := openStore(t, mvcc.Options{RingBytes: 1, LogReadBytes: bound})
	whole := openStore(t, mvcc.Options{RingBytes: 1})
	ring := openStore(t, mvcc.Options{LogReadBytes: bound})
	value := strings.Repeat("v", 1000)
	var start int64
	for _, s := range []*mvcc.Store{bounded, whole, ring} {
		start = s.Rev()
		for i := range 30 {
			if i == 12 {
				// One revision of 8 puts, larger than the bound by itself.
				var ops []*pb.RequestOp
				for j := range 8 {
					ops = append(ops, putOp(fmt.Appendf(nil, "/b/%d", j), value, 0))
				}
				if _, err := s.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			put(t, s, fmt.Sprintf("/a/%d", i%7), []byte(value+fmt.Sprint(i)))
		}
	}
	all := mvcc.NewKeyRange([]byte("/"), []byte{0})
	to := bounded.Rev()
	want, through, err := whole.Events(ctx, start+1, to, all)
	if err != nil || through != to {
		t.Fatalf("unbounded read: through %d, %v; want through %d", through, err, to)
	}
	if len(want) != 37 {
		t.Fatalf("unbounded read: %d events, want 37", len(want))
	}

	var got []*mvcc.Event
	pieces := 0
	for from := start + 1; from <= to; {
		evs, through, err := bounded.Events(ctx, from, to, all)
		if err != nil {
			t.Fatal(err)
		}
		pieces++
		if through < from || through > to || len(evs) == 0 || evs[0].Rev() != from || evs[len(evs)-1].Rev() != through {
			t.Fatalf("read from %d: through %d, events %d to %d", from, through, evs[0].Rev(), evs[len(evs)-1].Rev())
		}
		// Within the bound, but for the last revision read.
		size := 0
		for _, e := range evs {
			if e.Rev() < through {
				size += e.Size()
			}
		}
		if size >= bound {
			t.Fatalf("read from %d to %d: %d bytes before its last revision, bound %d", from, through, size, bound)
		}
		got = append(got, evs...)
		from = through + 1
	}
	if pieces < 5 {
		t.Fatalf("%d reads for %d events of 1 KB with a bound of %d bytes", pieces, len(want), bound)
	}
	if g, w := eventsString(got), eventsString(want); g != w {
		t.Fatalf("pieces read:\n%s\nwant:\n%s", g, w)
	}

	evs, through, err := ring.Events(ctx, start+1, ring.Rev(), all)
	if err != nil || through != ring.Rev() || eventsString(evs) != eventsString(want) {
		t.Fatalf("from the ring: through %d (want %d), %v, events\n%s\nwant\n%s", through, ring.Rev(), err, eventsString(evs), eventsString(want))
	}
}

// After a short read the next asks for twice what it got; after a full
// one for twice the step, up to max.
func TestNextReadStep(t *testing.T) {
	for _, tc := range []struct{ step, from, to, through, want int64 }{
		{2000, 5, 20, 7, 6},
		{6, 20, 20, 20, 12},
		{1500, 1, 1500, 1500, 2000},
		{2000, 1, 2000, 700, 1400},
	} {
		if got := mvcc.NextReadStep(tc.step, tc.from, tc.to, tc.through, 2000); got != tc.want {
			t.Errorf("NextReadStep(%d, %d, %d, %d, 2000) = %d, want %d", tc.step, tc.from, tc.to, tc.through, got, tc.want)
		}
	}
}

// eventsString is what a watcher sees of evs, one event per line.
func eventsString(evs []*mvcc.Event) string {
	var b strings.Builder
	for _, e := range evs {
		// The values are 1,000 v's and a number: that number tells them apart.
		fmt.Fprintf(&b, "%d %v %s %d %q", e.Rev(), e.Type, e.Kv.Key, len(e.Kv.Value), strings.TrimLeft(string(e.Kv.Value), "v"))
		if e.PrevKv != nil {
			fmt.Fprintf(&b, " prev %d %q", e.PrevKv.ModRevision, strings.TrimLeft(string(e.PrevKv.Value), "v"))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
