package endpoint_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	qtls "github.com/quantyroot/quantykube/pkg/tls"
	"github.com/quantyroot/quantykube/test/framework"
)

// The client port answers etcd's HTTP paths beside gRPC, in clear text:
// /version as kubeadm's preflight reads it, /health as etcd's. A client
// that connects and says nothing holds up neither kind of request.
func TestClientPortHTTP(t *testing.T) {
	s, err := endpoint.Start(t.Context(), endpoint.Config{Listener: "127.0.0.1:0", Endpoint: "sqlite://" + filepath.Join(t.TempDir(), "s.db"), EmulatedETCDVersion: "3.6.4"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	silent, err := net.Dial("tcp", strings.TrimPrefix(s.ClientURL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	// Well within splitTimeout, which the silent client could hold up.
	quick := &http.Client{Timeout: 3 * time.Second}
	resp, err := quick.Get(s.ClientURL() + "/version")
	if err != nil {
		t.Fatalf("GET /version while a client says nothing: %v", err)
	}
	var v struct{ Etcdserver, Etcdcluster string }
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if resp.StatusCode != 200 || err != nil || v.Etcdserver != "3.6.4" || v.Etcdcluster != "3.6.0" {
		t.Errorf("GET /version: %d %+v (%v), want etcdserver 3.6.4, etcdcluster 3.6.0", resp.StatusCode, v, err)
	}
	expect(t, s.ClientURL(), "/health", 200, `{"health":"true","reason":""}`+"\n")
	expect(t, s.ClientURL(), "/readyz", 200, "ok")
	if code, _ := get(t, s.ClientURL()+"/metrics"); code != http.StatusNotFound {
		t.Errorf("GET /metrics on the client port: %d, want 404 (metrics have their own listener)", code)
	}
	resp, err = http.Post(s.ClientURL()+"/version", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /version: %d, want 405", resp.StatusCode)
	}

	cli := etcdClient(t, s.ClientURL(), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("gRPC put beside HTTP: %v", err)
	}
}

// Over TLS with client certificates required, HTTP/1 clients get the same
// paths with a certificate and nothing without one, and gRPC still works.
func TestClientPortHTTPOverTLS(t *testing.T) {
	ca := framework.NewCA(t, "split-ca")
	certFile, keyFile := ca.Issue(t, framework.CertSpec{CommonName: "server", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	clientCert, clientKey := ca.Issue(t, framework.CertSpec{CommonName: "client", Client: true})
	s, err := endpoint.Start(t.Context(), endpoint.Config{
		Listener:        "127.0.0.1:0",
		Endpoint:        "sqlite://" + filepath.Join(t.TempDir(), "s.db"),
		ServerTLSConfig: qtls.Config{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: ca.CertFile},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.ClientURL(), "https://") {
		t.Fatalf("client URL %s, want https://", s.ClientURL())
	}
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	// As kubeadm builds its client: a transport of its own with a TLS
	// config, which offers HTTP/1.1 only.
	withCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	resp, err := withCert.Get(s.ClientURL() + "/version")
	if err != nil {
		t.Fatalf("GET /version with a client certificate: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"etcdserver":"3.6.0"`) {
		t.Errorf("GET /version over TLS: %d %s", resp.StatusCode, body)
	}
	without := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if resp, err := without.Get(s.ClientURL() + "/version"); err == nil {
		resp.Body.Close()
		t.Errorf("GET /version without a client certificate: %d, want a refused handshake", resp.StatusCode)
	}

	cli := etcdClient(t, s.ClientURL(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("gRPC over TLS beside HTTP: %v", err)
	}
}

func etcdClient(t *testing.T, url string, tc *tls.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
