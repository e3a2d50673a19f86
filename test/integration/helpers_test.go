package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/test/framework"
)

// progressInterval is the watch progress_notify period every backend runs
// with (etcd's default is 10 minutes, too long to test); progressWait
// bounds the wait for one periodic notification.
const (
	progressInterval = time.Second
	progressWait     = 5 * progressInterval
)

// run runs f on each of backends as a subtest, in parallel with the other
// tests and backends, each on a fresh, empty server.
func run(t *testing.T, backends []framework.Backend, f func(t *testing.T, s *framework.Target)) {
	t.Helper()
	t.Parallel()
	framework.Run(t, backends, func(t *testing.T, b framework.Backend) {
		t.Parallel()
		f(t, framework.Start(t, b, framework.Options{ProgressNotifyInterval: progressInterval}))
	})
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

// errCode is the gRPC code of err, through the client's conversion of
// etcd's well-known errors into rpctypes.EtcdError.
func errCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}

// wantErr asserts that err carries exactly etcd's text and gRPC code.
func wantErr(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error %q (%v), got none", text, code)
	}
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	if msg != text {
		t.Fatalf("want error text %q, got %q", text, msg)
	}
	if c := errCode(err); c != code {
		t.Fatalf("error %q: want code %v, got %v", text, code, c)
	}
}

// currentRev reads the store's current revision.
func currentRev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), "\x00probe-current-revision")
	must(t, err)
	return resp.Header.Revision
}

func wantRev(t *testing.T, cli *clientv3.Client, want int64) {
	t.Helper()
	if got := currentRev(t, cli); got != want {
		t.Fatalf("current revision = %d, want %d", got, want)
	}
}

// kvString renders the fields of a KeyValue that tests compare.
func kvString(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{key=%q value=%q create=%d mod=%d version=%d lease=%d}",
		kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
}

func wantKV(t *testing.T, got *mvccpb.KeyValue, key, value string, create, mod, version, lease int64) {
	t.Helper()
	want := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: create, ModRevision: mod, Version: version, Lease: lease}
	if kvString(got) != kvString(want) {
		t.Fatalf("kv = %s, want %s", kvString(got), kvString(want))
	}
}

func keysOf(kvs []*mvccpb.KeyValue) []string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func wantKeys(t *testing.T, kvs []*mvccpb.KeyValue, want ...string) {
	t.Helper()
	got := keysOf(kvs)
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("keys = %q, want %q", got, want)
	}
}

// evString renders an event for comparison.
func evString(ev *clientv3.Event) string {
	s := fmt.Sprintf("%s %s", ev.Type, kvString(ev.Kv))
	if ev.PrevKv != nil {
		s += " prev=" + kvString(ev.PrevKv)
	}
	return s
}

// watchCreated opens a watch with created notify and waits for the created
// response, so that writes made afterwards are sure to be seen.
func watchCreated(t *testing.T, ctx context.Context, cli *clientv3.Client, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	t.Helper()
	wch := cli.Watch(ctx, key, append(opts, clientv3.WithCreatedNotify())...)
	select {
	case wr, ok := <-wch:
		if !ok {
			t.Fatalf("watch %q closed before created", key)
		}
		if !wr.Created {
			t.Fatalf("first watch response is not created: %+v", wr)
		}
		if err := wr.Err(); err != nil {
			t.Fatalf("watch %q: %v", key, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch %q: no created response", key)
	}
	return wch
}

// collectEvents reads n events from wch, failing on a timeout, a closed
// channel or an error response.
func collectEvents(t *testing.T, wch clientv3.WatchChan, n int, timeout time.Duration) []*clientv3.Event {
	t.Helper()
	var evs []*clientv3.Event
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(evs) < n {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(evs), n)
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("watch error after %d of %d events: %v", len(evs), n, err)
			}
			evs = append(evs, wr.Events...)
		case <-timer.C:
			t.Fatalf("timeout: %d of %d events", len(evs), n)
		}
	}
	if len(evs) > n {
		t.Fatalf("got %d events, want %d: last %s", len(evs), n, evString(evs[len(evs)-1]))
	}
	return evs
}

// noMoreEvents asserts nothing arrives on wch for d.
func noMoreEvents(t *testing.T, wch clientv3.WatchChan, d time.Duration) {
	t.Helper()
	select {
	case wr, ok := <-wch:
		if ok && len(wr.Events) > 0 {
			t.Fatalf("unexpected event %s", evString(wr.Events[0]))
		}
	case <-time.After(d):
	}
}
