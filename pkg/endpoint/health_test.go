package endpoint_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// expect asserts a health answer: its status and its exact body.
func expect(t *testing.T, base, path string, status int, body string) {
	t.Helper()
	code, got := get(t, base+path)
	if code != status || got != body {
		t.Errorf("GET %s: %d %q, want %d %q", path, code, got, status, body)
	}
}

// The health endpoints answer in Kubernetes' shape (and etcd's at
// /health); a database migrated past this binary's schema makes the
// server not ready, but still live.
func TestHealthEndpoints(t *testing.T) {
	ctx := context.Background()
	maddr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := endpoint.Start(ctx, endpoint.Config{Listener: "127.0.0.1:0", Endpoint: "sqlite://" + path, MetricsListenAddress: maddr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + maddr
	for _, p := range []string{"/livez", "/readyz", "/healthz", "/livez/writer", "/readyz/database", "/readyz/schema", "/healthz/shutdown"} {
		expect(t, base, p, 200, "ok")
	}
	expect(t, base, "/readyz?verbose", 200, "[+]ping ok\n[+]database ok\n[+]writer ok\n[+]schema ok\n[+]shutdown ok\nreadyz check passed\n")
	expect(t, base, "/livez?verbose", 200, "[+]ping ok\n[+]writer ok\nlivez check passed\n")
	expect(t, base, "/health", 200, `{"health":"true","reason":""}`+"\n")
	if code, _ := get(t, base+"/readyz/nothing"); code != http.StatusNotFound {
		t.Errorf("GET /readyz/nothing: %d, want 404", code)
	}

	// A newer quantykube migrated the database.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `UPDATE meta SET value = 99 WHERE name = 'schema'`); err != nil {
		t.Fatal(err)
	}
	expect(t, base, "/readyz", 500, "[+]ping ok\n[+]database ok\n[+]writer ok\n[-]schema failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n")
	expect(t, base, "/readyz/schema", 500, "internal server error: the database's schema version is 99, this quantykube's is 3: run the quantykube that migrated it\n")
	expect(t, base, "/health", 503, `{"health":"false","reason":"schema check failed"}`+"\n")
	expect(t, base, "/livez", 200, "ok")
	expect(t, base, "/readyz?exclude=schema&exclude=nothing&verbose", 200, "[+]ping ok\n[+]database ok\n[+]writer ok\n[+]schema excluded: ok\n[+]shutdown ok\nwarn: no check named \"nothing\" to exclude\nreadyz check passed\n")
}

// On PostgreSQL, a database that stops answering makes the server not
// ready (the database check fails) but leaves it live: restarting it would
// not help. Ready again once PostgreSQL is back.
func TestReadyzFollowsTheDatabase(t *testing.T) {
	cluster := framework.PostgresCluster(t)
	ctx := t.Context()
	maddr := freeAddr(t)
	s, err := endpoint.Start(ctx, endpoint.Config{Listener: "127.0.0.1:0", Endpoint: framework.PostgresDatabase(t), MetricsListenAddress: maddr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + maddr
	expect(t, base, "/readyz", 200, "ok")
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cluster.Stop(sctx, "fast"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			cluster.Start(context.Background())
		}
	}()
	code, body := get(t, base+"/readyz")
	if code != 500 || !strings.Contains(body, "[-]database failed: reason withheld\n") {
		t.Errorf("/readyz with PostgreSQL stopped: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz/database"); code != 500 || !strings.HasPrefix(body, "internal server error: read the revision: ") {
		t.Errorf("/readyz/database with PostgreSQL stopped: %d %q", code, body)
	}
	expect(t, base, "/livez", 200, "ok")
	if err := cluster.Start(sctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	for {
		if code, _ := get(t, base+"/readyz"); code == 200 {
			break
		}
		if sctx.Err() != nil {
			t.Fatal("not ready a minute after PostgreSQL came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freezer is a TCP proxy to a database that can stop passing bytes either
// way while keeping every connection open: a database that stops answering
// (a network partition, a hung host) rather than one that goes away.
type freezer struct {
	l      net.Listener
	target string
	gate   sync.RWMutex // held for writing while frozen
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{l: l, target: target}
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) accept() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, up)
		f.mu.Unlock()
		go f.pipe(c, up)
		go f.pipe(up, c)
	}
}

// pipe copies from src to dst, each write waiting while the proxy is
// frozen.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.gate.RLock()
			_, werr := dst.Write(buf[:n])
			f.gate.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (f *freezer) freeze()   { f.gate.Lock() }
func (f *freezer) unfreeze() { f.gate.Unlock() }

func (f *freezer) close() {
	f.l.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

// On PostgreSQL, a database that stops answering without closing its
// connections holds the writer in a batch (up to its 30 s deadline) and
// makes the server not ready; /livez still answers ok at once, so that a
// liveness probe does not restart QuantyKube for it (docs/postgresql.md).
// Ready again once the database answers.
func TestLivezWhileTheDatabaseHangs(t *testing.T) {
	ctx := t.Context()
	dsn := framework.PostgresDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFreezer(t, u.Host)
	u.Host = proxy.l.Addr().String()
	maddr := freeAddr(t)
	s, err := endpoint.Start(ctx, endpoint.Config{Listener: "127.0.0.1:0", Endpoint: u.String(), MetricsListenAddress: maddr,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + maddr
	put := func(ctx context.Context) error {
		_, err := s.Store().Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/k"), Value: []byte("v")}}}}})
		return err
	}
	if err := put(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, base, "/livez", 200, "ok")

	proxy.freeze()
	frozen := true
	defer func() {
		if frozen {
			proxy.unfreeze()
		}
	}()
	// A write: the writer waits on the database inside its batch.
	written := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		written <- put(wctx)
	}()
	probe := &http.Client{Timeout: 3 * time.Second}
	// Longer than a health check may take (10 s): the writer stays in its
	// batch throughout, and liveness answers at once every time.
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		resp, err := probe.Get(base + "/livez")
		if err != nil {
			t.Fatalf("/livez while the database hangs: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("/livez while the database hangs: %s", resp.Status)
		}
	}
	select {
	case err := <-written:
		t.Fatalf("the write finished while the database hung: %v", err)
	default:
	}
	if code, body := get(t, base+"/readyz/writer"); code != 500 {
		t.Errorf("/readyz/writer while the database hangs: %d %q", code, body)
	}

	proxy.unfreeze()
	frozen = false
	if err := <-written; err != nil {
		t.Errorf("the write once the database answered again: %v", err)
	}
	expect(t, base, "/readyz", 200, "ok")
}

// A warning (replication's lag) is listed by /readyz?verbose and fails
// no endpoint, etcd's /health included.
func TestHealthWarningNeverFails(t *testing.T) {
	maddr := freeAddr(t)
	warn := errors.New("12 revisions (3s) not yet in file:///bucket")
	s, err := endpoint.Start(t.Context(), endpoint.Config{Listener: "127.0.0.1:0", Endpoint: "sqlite://" + filepath.Join(t.TempDir(), "s.db"), MetricsListenAddress: maddr,
		HealthWarnings: []endpoint.HealthWarning{{Name: "replicate", Check: func(context.Context) error { return warn }}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + maddr
	expect(t, base, "/readyz", 200, "ok")
	expect(t, base, "/readyz?verbose", 200, "[+]ping ok\n[+]database ok\n[+]writer ok\n[+]schema ok\n[+]shutdown ok\n[!]replicate warning: "+warn.Error()+"\nreadyz check passed\n")
	expect(t, base, "/readyz/replicate", 200, "ok (warning: "+warn.Error()+")")
	expect(t, base, "/health", 200, `{"health":"true","reason":""}`+"\n")
}
