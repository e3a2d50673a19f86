package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/deploy"
)

// APIServiceCommand is `quantykube apiservice`.
type APIServiceCommand struct{}

// Usage is apiservice's help.
func (APIServiceCommand) Usage() string {
	return `quantykube apiservice --address IP [flags]

Registers QuantyKube's aggregated API with kube-apiserver: creates a CA and
a serving certificate for <service>.<namespace>.svc in --dir (an existing CA
there is kept), then prints the objects to apply: a Service without a
selector, its EndpointSlice with QuantyKube's address, the APIService with
the CA as caBundle, and the RBAC (deploy/aggregated-api).

Example:
  quantykube apiservice --address 10.0.0.5 --port 8443 --dir /etc/quantykube/api \
    --store-user quantykube | kubectl apply -f -
  quantykube serve --api-listen 10.0.0.5:8443 \
    --api-cert /etc/quantykube/api/apiserver.crt --api-key /etc/quantykube/api/apiserver.key \
    --api-client-ca /etc/kubernetes/pki/front-proxy-ca.crt --api-kubeconfig /etc/quantykube/reviewer.kubeconfig`
}

// apiserviceSpec fills the templates in deploy/aggregated-api.
type apiserviceSpec struct {
	Service, Namespace  string
	Address             string
	AddressType         string
	Port                int
	CABundle            string
	StoreUser           string
	StoreServiceAccount string
}

// Run writes the certificates and prints the objects.
func (c APIServiceCommand) Run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var s apiserviceSpec
	fs.StringVar(&s.Address, "address", "", "QuantyKube's address as kube-apiserver reaches it (required; not a loopback address: EndpointSlices refuse those)")
	fs.IntVar(&s.Port, "port", 8443, "the port of --api-listen")
	fs.StringVar(&s.Service, "service", "quantykube", "name of the Service kube-apiserver reaches QuantyKube through")
	fs.StringVar(&s.Namespace, "namespace", "kube-system", "namespace of the Service")
	fs.StringVar(&s.StoreUser, "store-user", "quantykube", "the user --api-kubeconfig authenticates as, allowed to create SubjectAccessReviews")
	fs.StringVar(&s.StoreServiceAccount, "store-service-account", "", "instead of --store-user: the service account (in --namespace) QuantyKube runs as (default: none, --store-user)")
	dir := fs.String("dir", ".", "where ca.crt, ca.key, apiserver.crt and apiserver.key are written")
	days := fs.Int("days", 365, "validity of the serving certificate, in days")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	ip := net.ParseIP(s.Address)
	switch {
	case s.Address == "":
		return errors.New("apiservice: --address is required")
	case ip == nil:
		return fmt.Errorf("apiservice: --address %q is not an IP address (an EndpointSlice holds addresses)", s.Address)
	case ip.IsLoopback():
		return fmt.Errorf("apiservice: --address %s is a loopback address: kube-apiserver refuses EndpointSlices that point there", s.Address)
	case s.Port <= 0 || s.Port > 65535:
		return fmt.Errorf("apiservice: --port %d is not a port", s.Port)
	case *days <= 0:
		return fmt.Errorf("apiservice: --days %d: want a positive number", *days)
	}
	s.AddressType = "IPv4"
	if ip.To4() == nil {
		s.AddressType = "IPv6"
	}
	caPEM, err := servingCert(*dir, s, ip, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return fmt.Errorf("apiservice: %w", err)
	}
	s.CABundle = base64.StdEncoding.EncodeToString(caPEM)
	for i, name := range []string{"aggregated-api/apiservice.yaml", "aggregated-api/rbac.yaml"} {
		t, err := deploy.AggregatedAPI.ReadFile(name)
		if err != nil {
			return fmt.Errorf("apiservice: %w", err)
		}
		out, err := fillTemplate(name, string(t), s.placeholders())
		if err != nil {
			return fmt.Errorf("apiservice: %w", err)
		}
		if i > 0 {
			fmt.Fprintln(stdout, "---")
		}
		if _, err := io.WriteString(stdout, out); err != nil {
			return fmt.Errorf("apiservice: %w", err)
		}
	}
	fmt.Fprintf(stderr, "apiservice: serving certificate for %s.%s.svc in %s; serve with --api-cert %s --api-key %s\n",
		s.Service, s.Namespace, *dir, filepath.Join(*dir, "apiserver.crt"), filepath.Join(*dir, "apiserver.key"))
	return nil
}

// placeholders are the values of the templates' {{.Field}}s.
func (s apiserviceSpec) placeholders() map[string]string {
	// The store's identity, a YAML flow mapping: its names quoted as JSON
	// strings, which YAML reads as they are.
	subject := "{kind: User, apiGroup: rbac.authorization.k8s.io, name: " + jsonString(s.StoreUser) + "}"
	if s.StoreServiceAccount != "" {
		subject = "{kind: ServiceAccount, name: " + jsonString(s.StoreServiceAccount) + ", namespace: " + jsonString(s.Namespace) + "}"
	}
	return map[string]string{
		".Service":      s.Service,
		".Namespace":    s.Namespace,
		".Address":      s.Address,
		".AddressType":  s.AddressType,
		".Port":         strconv.Itoa(s.Port),
		".CABundle":     s.CABundle,
		".StoreSubject": subject,
	}
}

func jsonString(v string) string {
	b, _ := json.Marshal(v) // a string always encodes
	return string(b)
}

// fillTemplate replaces each {{.Field}} of text by its value; any other
// {{...}} is an error. It is not text/template on purpose: a binary that
// links text/template's method calls by name keeps every exported method
// of every type, which made quantykube 7 MB larger and its resident
// memory at start 2.5 MB larger (docs/adr/010-aggregated-api.md).
func fillTemplate(name, text string, values map[string]string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(text, "{{")
		if i < 0 {
			b.WriteString(text)
			return b.String(), nil
		}
		j := strings.Index(text[i:], "}}")
		if j < 0 {
			return "", fmt.Errorf("%s: a {{ without }}", name)
		}
		key := text[i+2 : i+j]
		v, ok := values[key]
		if !ok {
			return "", fmt.Errorf("%s: unknown placeholder {{%s}}", name, key)
		}
		b.WriteString(text[:i])
		b.WriteString(v)
		text = text[i+j+2:]
	}
}

// servingCert makes (or reuses) the CA in dir and signs a serving
// certificate for the Service's names and the address; it returns the CA
// certificate as PEM.
func servingCert(dir string, s apiserviceSpec, ip net.IP, validity time.Duration) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caCert, caKey, caPEM, err := loadOrMakeCA(dir)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	svc := s.Service + "." + s.Namespace + ".svc"
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: svc},
		// The aggregator verifies <service>.<namespace>.svc; the others are
		// how people and probes may name it.
		DNSNames:    []string{svc, svc + ".cluster.local", s.Service + "." + s.Namespace, s.Service},
		IPAddresses: []net.IP{ip},
		NotBefore:   time.Now().Add(-5 * time.Minute),
		NotAfter:    time.Now().Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if err := writePEMFile(filepath.Join(dir, "apiserver.crt"), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return caPEM, writePEMFile(filepath.Join(dir, "apiserver.key"), "EC PRIVATE KEY", kb)
}

// loadOrMakeCA keeps an existing CA in dir, so that running the command
// again (a new address, a renewed certificate) keeps the APIService's
// caBundle valid.
func loadOrMakeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if certPEM, err := os.ReadFile(certPath); err == nil {
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s exists but its key does not: %w", certPath, err)
		}
		cb, kb := pemBytes(certPEM), pemBytes(keyPEM)
		cert, err := x509.ParseCertificate(cb)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", certPath, err)
		}
		key, err := x509.ParseECPrivateKey(kb)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", keyPath, err)
		}
		return cert, key, certPEM, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "quantykube-aggregated-api-ca"},
		NotBefore:             time.Now().Add(-5 * time.Minute),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := writePEMFile(keyPath, "EC PRIVATE KEY", kb); err != nil {
		return nil, nil, nil, err
	}
	if err := writePEMFile(certPath, "CERTIFICATE", der); err != nil {
		return nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func pemBytes(b []byte) []byte {
	if blk, _ := pem.Decode(bytes.TrimSpace(b)); blk != nil {
		return blk.Bytes
	}
	return nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

// writePEMFile writes a key or certificate readable by its owner only.
func writePEMFile(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
