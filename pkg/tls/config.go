// Package tls holds the TLS settings of the embedding API (pkg/endpoint),
// with kine's field names and meanings, so that a program written against
// kine's pkg/tls builds against QuantyKube by changing the module path.
package tls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Config is one side's certificates, by file.
//
// As a server (pkg/endpoint's ServerTLSConfig): CertFile and KeyFile are the
// serving certificate; TrustedCAFile, when set, is the CA whose client
// certificates are required, as etcd's --trusted-ca-file does; CAFile is
// the CA that signed CertFile, which pkg/endpoint hands to clients in
// ETCDConfig.
//
// As a client (BackendTLSConfig, for the database): CAFile verifies the
// server, CertFile and KeyFile are the client certificate, SkipVerify turns
// verification off.
type Config struct {
	CAFile        string
	CertFile      string
	KeyFile       string
	SkipVerify    bool
	TrustedCAFile string
}

// ServerConfig is the serving configuration, or nil when no certificate is
// set (plain TCP).
func (c Config) ServerConfig() (*tls.Config, error) {
	if c.CertFile == "" && c.KeyFile == "" {
		if c.TrustedCAFile != "" {
			return nil, errors.New("tls: a trusted CA for client certificates needs a serving certificate and key")
		}
		return nil, nil
	}
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, errors.New("tls: the serving certificate and key go together")
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: serving certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if c.TrustedCAFile != "" {
		pool, err := loadPool(c.TrustedCAFile)
		if err != nil {
			return nil, err
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// ClientConfig is the configuration for dialling a server, or nil when no
// file is set.
func (c Config) ClientConfig() (*tls.Config, error) {
	if c.CertFile == "" && c.KeyFile == "" && c.CAFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.SkipVerify}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return pool, nil
}
