package integration

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	qtls "github.com/quantyroot/quantykube/pkg/tls"
	"github.com/quantyroot/quantykube/test/framework"
)

// TestClientCertAuth: with client certificates required (etcd's
// --client-cert-auth with --trusted-ca-file, QuantyKube's
// --trusted-ca-file), the etcd client gets in with a certificate of the
// trusted CA, and is refused without one, with one of another CA, with an
// expired one, and without TLS.
func TestClientCertAuth(t *testing.T) {
	t.Parallel()
	framework.Run(t, framework.WithPooler, func(t *testing.T, b framework.Backend) {
		t.Parallel()
		ca := framework.NewCA(t, "trusted")
		other := framework.NewCA(t, "other")
		files := &framework.TLSFiles{CAFile: ca.CertFile}
		files.CertFile, files.KeyFile = ca.Issue(t, framework.CertSpec{CommonName: "server", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}})
		files.ClientCert, files.ClientKey = ca.Issue(t, framework.CertSpec{CommonName: "client", Client: true})
		x := framework.Start(t, b, framework.Options{TLS: files})
		if !strings.HasPrefix(x.Endpoint(), "https://") {
			t.Fatalf("TLS target serves %s", x.Endpoint())
		}

		// The trusted client.
		ctx := testCtx(t)
		_, err := x.Client(t).Put(ctx, "k", "v")
		must(t, err)

		client := func(cert, key string) *tls.Config {
			tc, err := qtls.Config{CAFile: ca.CertFile, CertFile: cert, KeyFile: key}.ClientConfig()
			must(t, err)
			if len(tc.Certificates) == 1 {
				// Present it even when the server names other CAs, which
				// Go's client otherwise takes as a reason to send none.
				c := tc.Certificates[0]
				tc.Certificates = nil
				tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
			}
			return tc
		}
		expiredCert, expiredKey := ca.Issue(t, framework.CertSpec{CommonName: "client", Client: true, Expired: true})
		otherCert, otherKey := other.Issue(t, framework.CertSpec{CommonName: "client", Client: true})
		for _, tc := range []struct {
			name  string
			tls   *tls.Config
			url   string
			alert string // the server's
		}{
			{"no client certificate", client("", ""), x.Endpoint(), "certificate required"},
			{"a certificate of another CA", client(otherCert, otherKey), x.Endpoint(), "unknown certificate authority"},
			{"an expired certificate", client(expiredCert, expiredKey), x.Endpoint(), "expired certificate"},
			{"no TLS", nil, "http://" + strings.TrimPrefix(x.Endpoint(), "https://"), ""},
		} {
			cli, err := framework.NewTLSClient(tc.tls, tc.url)
			must(t, err)
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = cli.Get(rctx, "k")
			cancel()
			_ = cli.Close()
			if err == nil {
				t.Fatalf("%s: the read succeeded", tc.name)
			}
			if tc.tls != nil {
				// Refused by the server in the handshake, not merely
				// unanswered: it sends a TLS alert.
				err = handshake(tc.tls, strings.TrimPrefix(x.Endpoint(), "https://"))
				if want := "remote error: tls: " + tc.alert; err == nil || err.Error() != want {
					t.Fatalf("%s: handshake: %v, want the server's alert %q", tc.name, err, want)
				}
			}
			t.Logf("%s: refused: %v", tc.name, err)
		}

		// The server goes on serving the trusted client.
		_, err = x.Client(t).Get(ctx, "k")
		must(t, err)
	})
}

// TestUnixSocketMode: a unix socket is the whole datastore to whoever can
// connect to it, so only its owner may.
func TestUnixSocketMode(t *testing.T) {
	t.Parallel()
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		t.Parallel()
		sock := filepath.Join(t.TempDir(), "qk.sock")
		x := framework.Start(t, b, framework.Options{Config: func(cfg *endpoint.Config) { cfg.Listener = "unix://" + sock }})
		st, err := os.Stat(sock)
		must(t, err)
		if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, want a socket with 0600", sock, st.Mode())
		}
		_, err = x.Client(t).Put(testCtx(t), "k", "v")
		must(t, err)
	})
}

// handshake connects with tc and reads, which surfaces the server's verdict
// on the client certificate (sent after the handshake in TLS 1.3).
func handshake(tc *tls.Config, addr string) error {
	tc = tc.Clone()
	tc.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}
