package apiagg_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/test/framework"
)

// dialTLS is a TLS connection with no client certificate, as a probe's.
func dialTLS(t *testing.T, ca *framework.CA, addr string) net.Conn {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A connection that sends nothing more after its request is closed after
// the idle timeout, certificate or not.
func TestIdleConnectionsClose(t *testing.T) {
	ca := framework.NewCA(t, "ca")
	cert, key := ca.Issue(t, framework.CertSpec{CommonName: "s", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	s, err := apiagg.New(apiagg.Config{Listen: "127.0.0.1:0", CertFile: cert, KeyFile: key, ClientCAFile: ca.CertFile,
		InsecureSkipObjectAuthorization: true, RestoreCheck: apiagg.RestoreCheckNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	apiagg.SetTimeouts(s, 300*time.Millisecond, 300*time.Millisecond)
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	conn := dialTLS(t, ca, s.Addr().String())
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err = br.ReadByte()
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("an idle connection stayed open for %v (read: %v)", time.Since(start), err)
	}
	// A connection that never finishes its headers is closed too.
	slow := dialTLS(t, ca, s.Addr().String())
	defer slow.Close()
	_, _ = io.WriteString(slow, "GET /healthz HTTP/1.1\r\n")
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := slow.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection without its headers stayed open: %v", err)
	}
}
