package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

// status reads a running server's metrics: its keys and what the live
// index holds of their values, within --live-index-value-bytes, and the
// estimate at more keys.
func TestStatusOfARunningServer(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	etcdAddr, metricsAddr := freeAddr(t), freeAddr(t)
	done := make(chan int, 1)
	var serveErr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"serve", "--endpoint", "sqlite://" + filepath.Join(t.TempDir(), "s.db"),
			"--listen-address", etcdAddr, "--metrics-listen-address", metricsAddr,
			"--live-index-value-bytes", "20Ki"}, &bytes.Buffer{}, &serveErr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, serveErr.String())
		}
	}()
	conn, err := grpc.NewClient(etcdAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	value := bytes.Repeat([]byte("v"), 1000)
	deadline := time.Now().Add(30 * time.Second)
	for i := range 100 {
		for {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "/registry/configmaps/ns/c%03d", i), Value: value})
			if err == nil {
				break
			}
			if i > 0 || time.Now().After(deadline) {
				t.Fatalf("put: %v; serve: %s", err, serveErr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"status", "--metrics-address", metricsAddr, "--objects", "1000"}, &out, &errOut); code != 0 {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"revision               101\n",
		"live keys              100, values 97.7 KiB (1000 B a key)\n",
		"of a 20.0 KiB budget",
		"at 1000 keys ",
		"resident memory",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status printed\n%s\nwithout %q", got, want)
		}
	}
	var held float64
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "live index ") {
			if _, err := fmt.Sscanf(line[strings.Index(line, "values ")+len("values "):], "%f KiB", &held); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
	}
	if held <= 0 || held > 20 {
		t.Errorf("the live index holds %.1f KiB of values with a 20 KiB budget", held)
	}

	if code := run(ctx, []string{"status", "--metrics-address", etcdAddr, "--timeout", "2s"}, &out, &errOut); code != 1 {
		t.Errorf("status of the etcd port exited %d, want 1", code)
	}
}

// status says how far replication is, from serve --replicate's metrics.
func TestStatusShowsReplication(t *testing.T) {
	m := map[string]float64{"quantykube_revision": 120, "quantykube_live_index_keys": 0, "quantykube_live_index_bytes": 0,
		"quantykube_live_index_value_bytes": 0, "quantykube_live_value_bytes": 0, "quantykube_live_index_value_budget_bytes": 0,
		"quantykube_replicate_shipped_revision": 100, "quantykube_replicate_lag_revisions": 20, "quantykube_replicate_lag_seconds": 3.5,
		"quantykube_replicate_bytes_total": 2048, "quantykube_replicate_errors_total": 4, "quantykube_replicate_failing": 1}
	var b strings.Builder
	if err := printStatus(&b, m, 0); err != nil {
		t.Fatal(err)
	}
	want := "replicated             to revision 100, 20 revisions (3.5s) behind, 2.0 KiB shipped, 4 failed intervals: failing (the server's log says why)\n"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("status:\n%s\nlacks\n%s", b.String(), want)
	}
}
