package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/test/testutil"
)

// envEtcdBin names an etcd binary to test instead of QuantyKube.
const envEtcdBin = "QUANTY_TEST_ETCD_BIN"

// etcdProgressInterval is the --watch-progress-notify-interval given to a
// real etcd (its default is 10 minutes).
const etcdProgressInterval = time.Second

// quantyProgressInterval is set on endpoint.Config.WatchProgressNotifyInterval
// when the core has that field; progressWait bounds the wait for a periodic
// progress notification.
const quantyProgressInterval = time.Second

// testServer is one server under test: QuantyKube in-process, or a real etcd
// child process when QUANTY_TEST_ETCD_BIN is set.
type testServer struct {
	t   *testing.T
	url string
	log *testutil.LogBuffer // dumped when a test fails

	// progressWait bounds the wait for a periodic progress notification.
	progressWait time.Duration

	// QuantyKube.
	dbPath string
	addr   string
	srv    *endpoint.Server

	// etcd.
	etcdBin    string
	dataDir    string
	clientPort int
	peerPort   int
	cmd        *exec.Cmd
	exited     chan struct{}
}

func isEtcd() bool { return os.Getenv(envEtcdBin) != "" }

// startServer starts a fresh, empty server for t and stops it when t ends.
func startServer(t *testing.T) *testServer {
	t.Helper()
	s := &testServer{t: t, log: &testutil.LogBuffer{}}
	if bin := os.Getenv(envEtcdBin); bin != "" {
		s.etcdBin = bin
		s.dataDir = filepath.Join(t.TempDir(), "etcd")
	} else {
		s.dbPath = filepath.Join(t.TempDir(), "state.db")
		s.addr = "127.0.0.1:0"
		// Made before the stop cleanup below is registered, so that a
		// PostgreSQL database made for the test is dropped only after the
		// server has stopped (cleanups run last-in, first-out).
		endpointFor(t, s.dbPath)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server log (tail):\n%s", s.log.Tail(8000))
		}
	})
	s.start()
	return s
}

func (s *testServer) start() {
	s.t.Helper()
	if s.etcdBin != "" {
		s.startEtcd()
	} else {
		s.startQuanty()
	}
	s.waitReady()
}

func (s *testServer) startQuanty() {
	s.t.Helper()
	cfg := endpoint.Config{
		Listener:       s.addr,
		Endpoint:       endpointFor(s.t, s.dbPath),
		NotifyInterval: quantyProgressInterval,
		Logger:         slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	s.progressWait = 5 * quantyProgressInterval
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := endpoint.Start(ctx, cfg)
	if err != nil && s.addr != "127.0.0.1:0" {
		// Restart: the old port may have been taken meanwhile.
		cfg.Listener = "127.0.0.1:0"
		srv, err = endpoint.Start(ctx, cfg)
	}
	if err != nil {
		s.t.Fatalf("endpoint.Start: %v", err)
	}
	s.srv = srv
	s.url = srv.ClientURL()
	if u, err := url.Parse(s.url); err == nil && u.Host != "" {
		s.addr = u.Host
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *testServer) startEtcd() {
	s.t.Helper()
	s.progressWait = 5 * etcdProgressInterval
	fresh := s.clientPort == 0
	for attempt := 0; attempt < 3; attempt++ {
		if fresh {
			s.clientPort, s.peerPort = freePort(s.t), freePort(s.t)
		}
		curl := fmt.Sprintf("http://127.0.0.1:%d", s.clientPort)
		purl := fmt.Sprintf("http://127.0.0.1:%d", s.peerPort)
		cmd := exec.Command(s.etcdBin,
			"--name", "default",
			"--data-dir", s.dataDir,
			"--listen-client-urls", curl,
			"--advertise-client-urls", curl,
			"--listen-peer-urls", purl,
			"--initial-advertise-peer-urls", purl,
			"--initial-cluster", "default="+purl,
			"--watch-progress-notify-interval", etcdProgressInterval.String(),
			"--unsafe-no-fsync",
			"--log-level", "warn",
		)
		cmd.Stdout, cmd.Stderr = s.log, s.log
		if err := cmd.Start(); err != nil {
			s.t.Fatalf("start etcd: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		s.cmd, s.exited, s.url = cmd, exited, curl
		// A port lost to a race makes etcd exit at once; try new ports.
		select {
		case <-exited:
			s.cmd = nil
			if !fresh {
				s.t.Fatalf("etcd exited at restart:\n%s", s.log.Tail(4000))
			}
			continue
		case <-time.After(300 * time.Millisecond):
			return
		}
	}
	s.t.Fatalf("etcd did not start:\n%s", s.log.Tail(4000))
}

// waitReady waits until the server answers a Status call.
func (s *testServer) waitReady() {
	s.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.url},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		s.t.Fatalf("client: %v", err)
	}
	defer cli.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Status(ctx, s.url)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("server at %s not ready: %v\n%s", s.url, err, s.log.Tail(4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *testServer) stop() {
	if s.srv != nil {
		if err := s.srv.Close(); err != nil {
			s.t.Errorf("server Close: %v", err)
		}
		s.srv = nil
	}
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		s.cmd = nil
	}
}

// restart stops the server and starts it again on the same database (the
// same --data-dir for etcd). Clients made before must not be used after.
func (s *testServer) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// client returns a new client of the server, closed when the test ends.
func (s *testServer) client() *clientv3.Client {
	s.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.url},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		s.t.Fatalf("client: %v", err)
	}
	s.t.Cleanup(func() { _ = cli.Close() })
	return cli
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
