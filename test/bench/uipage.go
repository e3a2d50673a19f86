package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
)

// The web page's first view (issue 55, ADR-047), as the server serves
// it: the page, every script and style it loads, and its first data
// request (the timeline's first page of changes, in JSON), each through
// the aggregated API's TLS listener as kube-apiserver's front proxy sends
// them. The browser's own work (parsing, layout) is not in it.

const uiBase = "/apis/quanty.quantyroot.io/v1alpha1/ui/"

// uiAPI is the aggregated API of a bench server: its flags, and a client
// as the front proxy.
type uiAPI struct {
	args   []string
	url    string
	client *http.Client
}

// newUIAPI writes a serving certificate and a front-proxy CA and client
// certificate into dir, for a server on a free port of 127.0.0.1. It
// serves without kube-apiserver: object authorization and restores' dry
// runs off, the caller in system:masters.
func newUIAPI(dir string) (*uiAPI, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	caCert, caKey, err := benchCA("bench-ca")
	if err != nil {
		return nil, err
	}
	write := func(name string, b []byte) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, b, 0o600)
	}
	serving, servingKey, err := benchLeaf(caCert, caKey, "quantykube", false)
	if err != nil {
		return nil, err
	}
	client, clientKey, err := benchLeaf(caCert, caKey, "front-proxy-client", true)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ui-ca.crt": pemOf("CERTIFICATE", caCert.Raw), "ui-serving.crt": serving, "ui-serving.key": servingKey}
	paths := map[string]string{}
	for n, b := range files {
		if paths[n], err = write(n, b); err != nil {
			return nil, err
		}
	}
	pair, err := tls.X509KeyPair(client, clientKey)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return &uiAPI{
		args: []string{"--api-listen", addr, "--api-cert", paths["ui-serving.crt"], "--api-key", paths["ui-serving.key"],
			"--api-client-ca", paths["ui-ca.crt"], "--api-insecure-skip-object-authorization", "--api-restore-check", "none"},
		url: "https://" + addr,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}, MaxIdleConnsPerHost: 8}},
	}, nil
}

func pemOf(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func benchCA(cn string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// benchLeaf is a certificate for cn signed by the CA, for client or
// server auth (127.0.0.1), and its key, in PEM.
func benchLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, client bool) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", kb), nil
}

func (u *uiAPI) get(ctx context.Context, path, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Remote-User", "bench")
	req.Header.Set("X-Remote-Group", "system:masters")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %.300s", path, resp.Status, b)
	}
	return b, err
}

var moduleRef = regexp.MustCompile(`(?:src|href)="([a-z]+\.(?:js|css))"|from '\./([a-z]+\.js)'|import\('\./([a-z]+\.js)'\)`)

// firstView loads the page as a browser does: the page, then every
// script and style it names, transitively, then the timeline's first data
// request (the page's request, without the window's lower bound:
// changesRequest says why). It answers the time, the bytes of scripts and
// styles, and the entries of the data page.
func (u *uiAPI) firstView(ctx context.Context) (time.Duration, int, int, error) {
	t0 := time.Now()
	page, err := u.get(ctx, uiBase, "")
	if err != nil {
		return 0, 0, 0, err
	}
	seen := map[string]bool{}
	queue := []string{}
	add := func(b []byte) {
		for _, m := range moduleRef.FindAllSubmatch(b, -1) {
			for _, g := range m[1:] {
				if n := string(g); n != "" && !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
	}
	add(page)
	bytes := 0
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		b, err := u.get(ctx, uiBase+n, "")
		if err != nil {
			return 0, 0, 0, err
		}
		bytes += len(b)
		add(b)
	}
	q, err := proto.Marshal(changesRequest())
	if err != nil {
		return 0, 0, 0, err
	}
	data, err := u.get(ctx, strings.TrimSuffix(uiBase, "ui/")+"changes?q="+base64.RawURLEncoding.EncodeToString(q)+
		"&exclude=events&exclude=leases.coordination.k8s.io", "application/json;as=decoded")
	if err != nil {
		return 0, 0, 0, err
	}
	d := time.Since(t0)
	return d, bytes, strings.Count(string(data), `"revision":`), nil
}

// uiFirstViews measures n first views, one after another, and answers
// their times sorted.
func (u *uiAPI) firstViews(ctx context.Context, n int) ([]time.Duration, int, int, error) {
	var ds []time.Duration
	var bytes, entries int
	for range n {
		// A new browser: no connection to reuse.
		u.client.CloseIdleConnections()
		d, b, e, err := u.firstView(ctx)
		if err != nil {
			return nil, 0, 0, err
		}
		ds, bytes, entries = append(ds, d), b, e
	}
	slices.Sort(ds)
	return ds, bytes, entries, nil
}
