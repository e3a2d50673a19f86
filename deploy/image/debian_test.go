package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func selfSigned(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The bundle holds every .crt under the directory, in byte order of their
// paths (not the order they were written in), each ending in a newline,
// and nothing else.
func TestCACertificatesBundle(t *testing.T) {
	d := t.TempDir()
	b := selfSigned(t, "b")
	a := bytes.TrimSuffix(selfSigned(t, "a"), []byte("\n"))
	write(t, filepath.Join(d, "mozilla", "b.crt"), b)
	write(t, filepath.Join(d, "mozilla", "a.crt"), a)
	write(t, filepath.Join(d, "README"), []byte("not a certificate"))
	got, err := caCertificates(d)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{}, a...), '\n'), b...)
	if !bytes.Equal(got, want) {
		t.Errorf("bundle:\n%s\nwant a.crt then b.crt:\n%s", got, want)
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(got) {
		t.Error("crypto/x509 reads no certificate from the bundle")
	}

	write(t, filepath.Join(d, "mozilla", "c.crt"), []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"))
	if _, err := caCertificates(d); err == nil || !strings.Contains(err.Error(), "c.crt") {
		t.Errorf("a broken certificate: got %v, want an error naming it", err)
	}
	if _, err := caCertificates(t.TempDir()); err == nil {
		t.Error("no certificate at all: want an error")
	}
}

// The zoneinfo tree keeps its files and the links inside it; a link out
// of it (tzdata's localtime, to the host's /etc/localtime) is left out.
func TestZoneFiles(t *testing.T) {
	root := t.TempDir()
	zi := filepath.Join(root, zoneinfo)
	for i := range 120 {
		write(t, filepath.Join(zi, "Etc", "Zone"+strings.Repeat("x", i%7)+string(rune('a'+i%26))), []byte("TZif"))
	}
	write(t, filepath.Join(zi, "UTC"), []byte("TZif2"))
	for name, target := range map[string]string{"Zulu": "UTC", "Etc/UCT": "../UTC", "localtime": "/etc/localtime", "Outside": "../../../etc/passwd"} {
		if err := os.Symlink(target, filepath.Join(zi, name)); err != nil {
			t.Fatal(err)
		}
	}
	es, err := zoneFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]entry{}
	for _, e := range es {
		got[e.name] = e
	}
	if e := got[zoneinfo+"/Zulu"]; e.link != "UTC" {
		t.Errorf("Zulu: %+v, want a link to UTC", e)
	}
	if e := got[zoneinfo+"/Etc/UCT"]; e.link != "../UTC" {
		t.Errorf("Etc/UCT: %+v, want a link to ../UTC", e)
	}
	for _, n := range []string{"localtime", "Outside"} {
		if _, ok := got[zoneinfo+"/"+n]; ok {
			t.Errorf("%s points out of zoneinfo, and is in the image", n)
		}
	}
	if e := got[zoneinfo+"/UTC"]; string(e.data) != "TZif2" || e.mode != 0o644 {
		t.Errorf("UTC: %+v", e)
	}
	if _, err := zoneFiles(t.TempDir()); err == nil {
		t.Error("no zoneinfo: want an error")
	}
}

func TestDebianFilesNeedBothPackages(t *testing.T) {
	_, err := debianFiles([]*debPackage{{Name: "tzdata", dir: t.TempDir(), File: "tzdata.deb"}})
	if err == nil || !strings.Contains(err.Error(), "ca-certificates") {
		t.Errorf("got %v, want an error naming ca-certificates", err)
	}
}
