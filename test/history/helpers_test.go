package history

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/proto/historypb"
	"github.com/quantyroot/quantykube/test/framework"
)

// clock is the store's clock in tests that move time: it stands still
// unless advanced, so every commit time is known exactly.
type clock struct{ ms atomic.Int64 }

// clockStart is a fixed, recent time.
var clockStart = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func newClock() *clock {
	c := &clock{}
	c.ms.Store(clockStart.UnixMilli())
	return c
}

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) nowMs() int64            { return c.ms.Load() }
func (c *clock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// env is one server under test and its clients.
type env struct {
	t    *testing.T
	x    *framework.Target
	url  string
	etcd *clientv3.Client
	hist historypb.HistoryClient
}

// startEnv starts a fresh, empty QuantyKube of backend b in this process,
// on clk when it is not nil, with config (when not nil) adjusting its
// configuration; it stops when t ends.
func startEnv(t *testing.T, b framework.Backend, clk *clock, config func(*endpoint.Config)) *env {
	t.Helper()
	x := framework.Start(t, b, framework.Options{Config: func(cfg *endpoint.Config) {
		if clk != nil {
			cfg.Now = clk.Now
		}
		if config != nil {
			config(cfg)
		}
	}})
	e := &env{t: t, x: x}
	e.connect()
	return e
}

// connect makes the etcd and History clients of the server as it is now
// (a restart may move it to another port).
func (e *env) connect() {
	e.t.Helper()
	e.url = e.x.Endpoint()
	target := e.url
	if u, err := url.Parse(e.url); err == nil && u.Scheme != "unix" {
		target = "passthrough:///" + u.Host
	}
	e.etcd = e.x.Client(e.t)
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatalf("history client: %v", err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	e.hist = historypb.NewHistoryClient(conn)
}

// restart stops the server and starts it again on the same database.
func (e *env) restart() {
	e.t.Helper()
	e.x.Restart(e.t)
	e.connect()
}

// testCtx bounds every call of a test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func (e *env) put(key, value string, opts ...clientv3.OpOption) int64 {
	e.t.Helper()
	resp, err := e.etcd.Put(testCtx(e.t), key, value, opts...)
	must(e.t, err)
	return resp.Header.Revision
}

// del deletes key and returns the revision and whether it deleted it.
func (e *env) del(key string) (int64, bool) {
	e.t.Helper()
	resp, err := e.etcd.Delete(testCtx(e.t), key)
	must(e.t, err)
	return resp.Header.Revision, resp.Deleted == 1
}

func (e *env) rev() int64 {
	e.t.Helper()
	resp, err := e.etcd.Get(testCtx(e.t), "\x00probe")
	must(e.t, err)
	return resp.Header.Revision
}

func (e *env) get(req *historypb.Request) (*historypb.GetResponse, error) {
	return e.hist.Get(testCtx(e.t), req)
}

func (e *env) mustGet(req *historypb.Request) *historypb.GetResponse {
	e.t.Helper()
	resp, err := e.get(req)
	if err != nil {
		e.t.Fatalf("Get(%v): %v", req, err)
	}
	return resp
}

// logAll reads every page of a Log with the given page limit; it fails
// after maxPages pages.
func (e *env) logAll(req *historypb.Request, maxPages int) ([]*historypb.LogEntry, []*historypb.LogResponse) {
	e.t.Helper()
	var all []*historypb.LogEntry
	var pages []*historypb.LogResponse
	for range maxPages {
		resp, err := e.hist.Log(testCtx(e.t), req)
		if err != nil {
			e.t.Fatalf("Log(%v): %v", req, err)
		}
		pages = append(pages, resp)
		all = append(all, resp.Entries...)
		if resp.Continue == "" {
			return all, pages
		}
		req.Continue = resp.Continue
	}
	e.t.Fatalf("Log(%v): more than %d pages", req, maxPages)
	return nil, nil
}

// wantCode asserts err is a gRPC status with code.
func wantCode(t *testing.T, err error, code codes.Code, what string) *status.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, code)
	}
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("%s: %v, want code %v", what, err, code)
	}
	return st
}

// kvString renders the fields of a KeyValue that tests compare.
func kvString(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "<absent>"
	}
	return fmt.Sprintf("{key=%q value=%q create=%d mod=%d version=%d lease=%d}",
		kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
}

func entryString(e *historypb.LogEntry) string {
	return fmt.Sprintf("rev=%d ms=%d deleted=%d kv=%s prev=%s", e.Revision, e.UnixMs, e.Deleted, kvString(e.Kv), kvString(e.PrevKv))
}

// change is one write the model knows of.
type change struct {
	rev, ms int64
	key     string
	kv      *mvccpb.KeyValue // nil: a delete
	prev    *mvccpb.KeyValue
}

// model is what the store must answer: every change, with its revision and
// commit time.
type model struct {
	changes []change
	live    map[string]*mvccpb.KeyValue
}

func newModel() *model { return &model{live: map[string]*mvccpb.KeyValue{}} }

// put records a put at rev (committed at ms) with lease.
func (m *model) put(key, value string, rev, ms, lease int64) {
	prev := m.live[key]
	kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: rev, ModRevision: rev, Version: 1, Lease: lease}
	if prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
	}
	m.live[key] = kv
	m.changes = append(m.changes, change{rev: rev, ms: ms, key: key, kv: kv, prev: prev})
}

func (m *model) del(key string, rev, ms int64) {
	prev := m.live[key]
	delete(m.live, key)
	m.changes = append(m.changes, change{rev: rev, ms: ms, key: key, prev: prev})
}

// stateAt is key at rev.
func (m *model) stateAt(key string, rev int64) *mvccpb.KeyValue {
	var kv *mvccpb.KeyValue
	for _, c := range m.changes {
		if c.rev > rev {
			break
		}
		if c.key == key {
			kv = c.kv
		}
	}
	return kv
}

// revAt is the newest revision committed at or before ms (1, the empty
// store, before the first).
func (m *model) revAt(ms int64) int64 {
	rev := int64(1)
	for _, c := range m.changes {
		if c.ms <= ms {
			rev = max(rev, c.rev)
		}
	}
	return rev
}

// msOf is the commit time of rev.
func (m *model) msOf(rev int64) int64 {
	for _, c := range m.changes {
		if c.rev == rev {
			return c.ms
		}
	}
	return 0
}

// wantEntry compares a Log entry with a change.
func wantEntry(t *testing.T, got *historypb.LogEntry, c change) {
	t.Helper()
	want := &historypb.LogEntry{Revision: c.rev, UnixMs: c.ms, Kv: c.kv, PrevKv: c.prev}
	if c.kv == nil {
		want.Deleted = 1
		want.Kv = &mvccpb.KeyValue{Key: []byte(c.key), ModRevision: c.rev}
	}
	if entryString(got) != entryString(want) {
		t.Fatalf("log entry\n got %s\nwant %s", entryString(got), entryString(want))
	}
}
