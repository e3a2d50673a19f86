package e2e

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is the throwaway public key infrastructure of one cluster, written as
// PEM files into Dir. The CA keys never leave memory: nothing in the
// cluster signs certificates, only the test (IssueClient).
type PKI struct {
	Dir string
	ca  *authority

	// CA signs the apiserver's serving certificate and the admin's client
	// certificate (kube-apiserver's --client-ca-file).
	CACert string
	// FrontProxyCA signs the front-proxy client certificate
	// (--requestheader-client-ca-file).
	FrontProxyCACert string

	APIServerCert, APIServerKey               string
	FrontProxyClientCert, FrontProxyClientKey string
	AdminCert, AdminKey                       string
	// ServiceAccountKey signs service account tokens, ServiceAccountPub
	// verifies them.
	ServiceAccountKey, ServiceAccountPub string
}

// certValidity covers any test run; a day more guards against a clock that
// moves while the cluster runs.
const certValidity = 48 * time.Hour

// NewPKI generates the certificates and keys of a cluster into dir: a CA, a
// front-proxy CA and its client, the apiserver's serving certificate and an
// admin client certificate in system:masters, and the service-account key
// pair.
func NewPKI(dir string, extraIPs ...net.IP) (*PKI, error) {
	p := &PKI{Dir: dir}
	ca, err := newCA("quantykube-e2e-ca")
	if err != nil {
		return nil, err
	}
	fp, err := newCA("quantykube-e2e-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	p.ca = ca
	if p.CACert, err = p.writeCert("ca", ca.cert); err != nil {
		return nil, err
	}
	if p.FrontProxyCACert, err = p.writeCert("front-proxy-ca", fp.cert); err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// 10.0.0.1 is the first address of the service CIDR: the
		// in-cluster "kubernetes" service.
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)}, extraIPs...),
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}
	if p.APIServerCert, p.APIServerKey, err = p.issue("apiserver", ca, serving); err != nil {
		return nil, err
	}
	admin := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "e2e-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if p.AdminCert, p.AdminKey, err = p.issue("admin", ca, admin); err != nil {
		return nil, err
	}
	proxy := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "front-proxy-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if p.FrontProxyClientCert, p.FrontProxyClientKey, err = p.issue("front-proxy-client", fp, proxy); err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	if p.ServiceAccountKey, err = p.writeKey("sa", sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return nil, fmt.Errorf("service account public key: %w", err)
	}
	if p.ServiceAccountPub, err = p.write("sa.pub", "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// IssueClient makes a client certificate of the cluster CA for user cn in
// groups (its organizations), as name.crt and name.key.
func (p *PKI) IssueClient(name, cn string, groups ...string) (certPath, keyPath string, err error) {
	return p.issue(name, p.ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newCA(cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA %s: key: %w", cn, err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	cert, err := sign(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", cn, err)
	}
	return &authority{cert: cert, key: key}, nil
}

// issue makes a key and a certificate for it from tmpl, signed by ca, and
// writes both as name.crt and name.key.
func (p *PKI) issue(name string, ca *authority, tmpl *x509.Certificate) (certPath, keyPath string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("%s: key: %w", name, err)
	}
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	cert, err := sign(tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", name, err)
	}
	// A certificate that its CA does not verify would only show up as a
	// TLS failure deep inside kube-apiserver's start.
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: tmpl.ExtKeyUsage}); err != nil {
		return "", "", fmt.Errorf("%s: does not verify against %s: %w", name, ca.cert.Subject.CommonName, err)
	}
	if certPath, err = p.writeCert(name, cert); err != nil {
		return "", "", err
	}
	if keyPath, err = p.writeKey(name, key); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(certValidity)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

func (p *PKI) writeCert(name string, cert *x509.Certificate) (string, error) {
	return p.write(name+".crt", "CERTIFICATE", cert.Raw, 0o644)
}

func (p *PKI) writeKey(name string, key *ecdsa.PrivateKey) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", fmt.Errorf("%s: marshal key: %w", name, err)
	}
	return p.write(name+".key", "PRIVATE KEY", der, 0o600)
}

func (p *PKI) write(file, blockType string, der []byte, mode os.FileMode) (string, error) {
	path := filepath.Join(p.Dir, file)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), mode); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}
