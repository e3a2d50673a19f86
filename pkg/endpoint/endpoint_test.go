package endpoint_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/endpoint"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	_, body := get(t, "http://"+addr+"/metrics")
	return body
}

// The metrics endpoint reports the store's revision and its write batches.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	maddr := freeAddr(t)
	s, err := endpoint.Start(ctx, endpoint.Config{
		Listener:             "127.0.0.1:0",
		Endpoint:             "sqlite://" + filepath.Join(t.TempDir(), "s.db"),
		MetricsListenAddress: maddr,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		if _, err := c.Put(ctx, "k", strings.Repeat("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	body := scrape(t, maddr)
	for _, want := range []string{"quantykube_revision 4\n", "quantykube_etcd_floor_revision 0\n", "go_goroutines "} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The metrics by resource type refresh once at start, then rarely
	// (pkg/history's ReportTypes).
	for i := 0; i < 50 && !strings.Contains(body, "quantykube_history_type_scan_seconds "); i++ {
		time.Sleep(100 * time.Millisecond)
		body = scrape(t, maddr)
	}
	if !strings.Contains(body, "quantykube_history_type_scan_seconds ") {
		t.Errorf("no refresh of the metrics by type:\n%s", body)
	}
	if !strings.Contains(body, "quantykube_write_batch_size_count ") || strings.Contains(body, "quantykube_write_batch_size_count 0\n") {
		t.Errorf("no write batch observed:\n%s", body)
	}
}

// RedactEndpoint hides every password an endpoint URL can carry, in the
// user part or as a query parameter, and leaves the rest as it was.
func TestRedactEndpoint(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"sqlite:///var/lib/quantykube/state.db", "sqlite:///var/lib/quantykube/state.db"},
		{"postgres://qk:secret@db:5432/qk?sslmode=verify-full", "postgres://qk:xxxxx@db:5432/qk?sslmode=verify-full"},
		{"postgres://qk@db/qk?password=secret&sslmode=require", "postgres://qk@db/qk?password=xxxxx&sslmode=require"},
		{"postgres://db/qk?sslcert=c.crt&sslkey=c.key&sslpassword=secret", "postgres://db/qk?sslcert=c.crt&sslkey=c.key&sslpassword=xxxxx"},
		{"postgresql://db/qk?pass%77ord=secret", "postgresql://db/qk?password=xxxxx"},
		{"postgres://db/qk", "postgres://db/qk"},
		{"mysql://qk:se@cr:et@tcp(db:3306)/k3s?tls=true", "mysql://qk:xxxxx@tcp(db:3306)/k3s?tls=true"},
		{"mysql://qk@tcp(db:3306)/k3s", "mysql://qk@tcp(db:3306)/k3s"},
		{"mysql://qk:secret@db:3306/k3s", "mysql://qk:xxxxx@db:3306/k3s"},
	} {
		if got := endpoint.RedactEndpoint(c.in); got != c.want {
			t.Errorf("RedactEndpoint(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
