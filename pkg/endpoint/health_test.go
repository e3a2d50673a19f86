package endpoint_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	expect(t, base, "/readyz/schema", 500, "internal server error: the database's schema version is 99, this quantykube's is 2: run the quantykube that migrated it\n")
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
