package integration

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/test/framework"
)

// The differential suite sends the same raw requests, one at a time and in
// the same order, to QuantyKube and to a fresh etcd v3.6, and compares the
// answers field by field (cluster and member IDs and the raft term aside).
// Nothing here states what etcd answers: etcd does, so an edge where the two
// differ fails the test without anyone having thought of it first.
//
// A script starts both servers empty; its steps must not depend on time
// (lease TTLs left, timestamps) or on IDs the server picks (leases are
// granted with explicit IDs).

// side is one server a script runs on: raw gRPC clients, and the answers
// recorded so far.
type side struct {
	t     *testing.T
	ctx   context.Context
	name  string
	kv    pb.KVClient
	lease pb.LeaseClient
	cli   *clientv3.Client
	obs   []observation
	// quiet is how long a watch stream must stay silent before a step's
	// answers are taken as complete; want, when known from the reference,
	// is how many answers to wait for first.
	want  []int
	watch map[string]*rawWatch
}

// observation is one answer: a message, or an error as its gRPC code and
// text.
type observation struct {
	step string
	msg  proto.Message
	err  string
}

func (o observation) String() string {
	if o.msg == nil {
		return fmt.Sprintf("%s: error %s", o.step, o.err)
	}
	s := prototext.MarshalOptions{}.Format(o.msg)
	if len(s) > 600 {
		s = s[:300] + fmt.Sprintf(" ...(%d bytes)... ", len(s)-600) + s[len(s)-300:]
	}
	return fmt.Sprintf("%s: %s", o.step, s)
}

func (o observation) equal(p observation) bool {
	if o.step != p.step || o.err != p.err || (o.msg == nil) != (p.msg == nil) {
		return false
	}
	return o.msg == nil || proto.Equal(o.msg, p.msg)
}

// normalize clears what differs between any two servers however right they
// are: identities and etcd's raft term.
func normalize(m proto.Message) proto.Message {
	m = proto.Clone(m)
	r := m.ProtoReflect()
	if f := r.Descriptor().Fields().ByName("header"); f != nil && r.Has(f) {
		h := r.Get(f).Message().Interface().(*pb.ResponseHeader)
		h.ClusterId, h.MemberId, h.RaftTerm = 0, 0, 0
	}
	return m
}

// record adds the answer of a unary call.
func record[R proto.Message](s *side, step string, resp R, err error) {
	if err != nil {
		st, _ := status.FromError(err)
		s.obs = append(s.obs, observation{step: step, err: fmt.Sprintf("%v %q", st.Code(), st.Message())})
		return
	}
	s.obs = append(s.obs, observation{step: step, msg: normalize(resp)})
}

func (s *side) Range(step string, r *pb.RangeRequest) {
	resp, err := s.kv.Range(s.ctx, r)
	record(s, step, resp, err)
}

func (s *side) Put(step string, r *pb.PutRequest) {
	resp, err := s.kv.Put(s.ctx, r)
	record(s, step, resp, err)
}

func (s *side) Delete(step string, r *pb.DeleteRangeRequest) {
	resp, err := s.kv.DeleteRange(s.ctx, r)
	record(s, step, resp, err)
}

func (s *side) Txn(step string, r *pb.TxnRequest) {
	resp, err := s.kv.Txn(s.ctx, r)
	record(s, step, resp, err)
}

func (s *side) Compact(step string, rev int64) {
	resp, err := s.kv.Compact(s.ctx, &pb.CompactionRequest{Revision: rev})
	record(s, step, resp, err)
}

func (s *side) Grant(step string, r *pb.LeaseGrantRequest) {
	resp, err := s.lease.LeaseGrant(s.ctx, r)
	record(s, step, resp, err)
}

func (s *side) Revoke(step string, id int64) {
	resp, err := s.lease.LeaseRevoke(s.ctx, &pb.LeaseRevokeRequest{ID: id})
	record(s, step, resp, err)
}

// TimeToLive records what does not depend on time: the lease's granted TTL
// and keys (in order: etcd lists them from a map), or TTL -1 for an
// unknown lease.
func (s *side) TimeToLive(step string, id int64) {
	resp, err := s.lease.LeaseTimeToLive(s.ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
	if err == nil {
		if resp.TTL > 0 {
			resp.TTL = 1
		}
		slices.SortFunc(resp.Keys, bytes.Compare)
	}
	record(s, step, resp, err)
}

// KeepAliveOnce sends one keepalive on a stream of its own and records the
// answer (TTL 0 for an unknown lease).
func (s *side) KeepAliveOnce(step string, id int64) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	stream, err := s.lease.LeaseKeepAlive(ctx)
	if err == nil {
		err = stream.Send(&pb.LeaseKeepAliveRequest{ID: id})
	}
	var resp *pb.LeaseKeepAliveResponse
	if err == nil {
		resp, err = stream.Recv()
	}
	record(s, step, resp, err)
}

// Watch sends req on the named raw stream (opened on first use) and
// records every answer until the stream is quiet.
func (s *side) Watch(step, stream string, req *pb.WatchRequest) {
	w := s.watch[stream]
	if w == nil {
		w = openRawWatch(s.t, s.ctx, s.cli)
		s.watch[stream] = w
	}
	w.send(req)
	s.drain(step, w)
}

// Drain records what the named stream sends without a request (events of
// writes made since).
func (s *side) Drain(step, stream string) { s.drain(step, s.watch[stream]) }

func (s *side) drain(step string, w *rawWatch) {
	// The reference's count tells how many to wait for; after them (or on
	// the reference itself), anything more that comes while the stream
	// stays quiet. etcd syncs a watcher that starts in the past every
	// 100 ms, so quiet means well over that.
	n := 0
	if i := len(s.obs); s.want != nil && i < len(s.want) {
		n = s.want[i]
	}
	got := 0
	var answers []*pb.WatchResponse
	deadline := time.After(10 * time.Second)
	for {
		wait := 400 * time.Millisecond
		if got < n {
			wait = 10 * time.Second
		}
		select {
		case r, ok := <-w.ch:
			if !ok {
				s.obs = append(s.obs, observation{step: step, err: "watch stream closed"})
				return
			}
			got++
			answers = append(answers, r)
			continue
		case <-time.After(wait):
		case <-deadline:
		}
		break
	}
	// Watches on one stream are served in no set order (etcd notifies
	// its watchers from a map), each watch's own answers in order.
	slices.SortStableFunc(answers, func(a, b *pb.WatchResponse) int { return cmp.Compare(a.WatchId, b.WatchId) })
	for i, r := range answers {
		s.obs = append(s.obs, observation{step: fmt.Sprintf("%s [%d]", step, i+1), msg: normalize(r)})
	}
	// One observation per step even when nothing came.
	s.obs = append(s.obs, observation{step: fmt.Sprintf("%s: %d answers", step, got), err: "-"})
}

// script is a request sequence run on both servers.
type script struct {
	name string
	run  func(s *side)
}

// TestDifferential runs every script on QuantyKube (SQLite and PostgreSQL)
// and on etcd, and compares the answers step by step.
func TestDifferential(t *testing.T) {
	t.Parallel()
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		t.Parallel()
		for _, sc := range differentialScripts {
			t.Run(sc.name, func(t *testing.T) {
				framework.Require(t, framework.Etcd)
				ref := newSide(t, "etcd", framework.Start(t, framework.Etcd, framework.Options{}))
				sc.run(ref)
				sut := newSide(t, string(b), framework.Start(t, b, framework.Options{}))
				sut.want = answersPerStep(ref.obs)
				sc.run(sut)
				compareSides(t, ref, sut)
			})
		}
	})
}

func newSide(t *testing.T, name string, x *framework.Target) *side {
	cli := x.Client(t)
	conn := cli.ActiveConnection()
	return &side{t: t, ctx: testCtx(t), name: name, kv: pb.NewKVClient(conn), lease: pb.NewLeaseClient(conn), cli: cli, watch: map[string]*rawWatch{}}
}

// answersPerStep is, per observation index, how many watch answers the
// step that starts there got: what the other side must wait for.
func answersPerStep(obs []observation) []int {
	out := make([]int, len(obs))
	for i := range obs {
		n := 0
		for j := i; j < len(obs) && obs[j].err != "-"; j++ {
			n++
		}
		out[i] = n
	}
	return out
}

func compareSides(t *testing.T, ref, sut *side) {
	t.Helper()
	// Every difference is reported, up to a few: one often makes the next
	// (a revision taken by one server and not the other).
	diffs := 0
	for i := 0; i < max(len(ref.obs), len(sut.obs)) && diffs < 4; i++ {
		var r, s observation
		if i < len(ref.obs) {
			r = ref.obs[i]
		}
		if i < len(sut.obs) {
			s = sut.obs[i]
		}
		if !r.equal(s) {
			if r.msg != nil && s.msg != nil {
				r.step, s.step = r.step+"\n"+firstDifference(r.msg, s.msg), s.step+"\n"+firstDifference(s.msg, r.msg)
			}
			var ctx []string
			for j := max(0, i-3); j < i; j++ {
				ctx = append(ctx, "  "+ref.obs[j].String())
			}
			t.Errorf("answer %d differs from etcd's\netcd:       %s\n%-11s %s\nbefore it:\n%s", i, r, sut.name+":", s, strings.Join(ctx, "\n"))
			diffs++
		}
	}
	if diffs == 0 {
		t.Logf("%d answers, all as etcd's", len(ref.obs))
	}
}

// firstDifference is a's text from the first line where it differs from
// b's, a few lines of it.
func firstDifference(a, b proto.Message) string {
	al := strings.Split(prototext.MarshalOptions{Multiline: true}.Format(a), "\n")
	bl := strings.Split(prototext.MarshalOptions{Multiline: true}.Format(b), "\n")
	i := 0
	for i < len(al) && i < len(bl) && al[i] == bl[i] {
		i++
	}
	return fmt.Sprintf("    line %d: %s", i+1, strings.Join(al[i:min(len(al), i+4)], "\n    "))
}
