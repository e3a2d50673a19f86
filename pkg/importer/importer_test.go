package importer

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/tls"
	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// An etcd source names its endpoints as etcdctl does, the scheme given
// once or on each; etcd:// follows the TLS files; a plaintext endpoint with
// TLS files, or anything that is not an etcd URL, is refused.
func TestEtcdEndpoints(t *testing.T) {
	for _, c := range []struct {
		from    string
		tls     bool
		want    []string
		wantErr string
	}{
		{from: "etcd://a:2379,b:2379", want: []string{"http://a:2379", "http://b:2379"}},
		{from: "etcd://a:2379, b:2379", tls: true, want: []string{"https://a:2379", "https://b:2379"}},
		{from: "https://a:2379,https://b:2379/", tls: true, want: []string{"https://a:2379", "https://b:2379"}},
		{from: "http://127.0.0.1:2379", want: []string{"http://127.0.0.1:2379"}},
		{from: "https://127.0.0.1:2379", want: []string{"https://127.0.0.1:2379"}},
		{from: "http://127.0.0.1:2379", tls: true, wantErr: "is plaintext but TLS files were given"},
		{from: "etcd://a:2379,http://b:2379", tls: true, wantErr: `"http://b:2379" is plaintext`},
		{from: "etcd://a:2379/prefix", wantErr: "want etcd://HOST:PORT"},
		{from: "etcd://", wantErr: "want etcd://HOST:PORT"},
		{from: "etcd://a:2379,postgres://b/kine", wantErr: `"postgres://b/kine": want etcd://HOST:PORT`},
	} {
		got, err := etcdEndpoints(c.from, c.tls)
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("etcdEndpoints(%q, tls %v): %v, %v; want an error containing %q", c.from, c.tls, got, err, c.wantErr)
		case c.wantErr == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("etcdEndpoints(%q, tls %v): %v, %v; want %v", c.from, c.tls, got, err, c.want)
		}
	}
}

// kine's encoding of kube-apiserver's compact key: "VERSION|VALUE", or the
// version alone from releases before it, which kine answers as "0".
func TestDecodeKineVersion(t *testing.T) {
	for _, c := range []struct {
		in      string
		version int64
		value   string
		ok      bool
	}{
		{"3|12", 3, "12", true},
		{"1|", 1, "", true},
		{"7|a|b", 7, "a|b", true},
		{"5", 5, "0", true},
		{"0|12", 0, "", false},
		{"-1", 0, "", false},
		{"x|12", 0, "", false},
		{"", 0, "", false},
	} {
		v, val, err := decodeKineVersion([]byte(c.in))
		if c.ok != (err == nil) || v != c.version || string(val) != c.value {
			t.Errorf("decodeKineVersion(%q) = %d, %q, %v; want %d, %q, ok %v", c.in, v, val, err, c.version, c.value, c.ok)
		}
	}
}

// recorder is a Sink that keeps what it is given.
type recorder struct {
	kvs    []*mvccpb.KeyValue
	leases map[int64]int64
}

func (r *recorder) Put(kv *mvccpb.KeyValue) error { r.kvs = append(r.kvs, kv); return nil }

func (r *recorder) Lease(id, ttl int64) error {
	if r.leases == nil {
		r.leases = map[int64]int64{}
	}
	r.leases[id] = ttl
	return nil
}

func readAll(t *testing.T, from string, opts Options) (*recorder, Summary, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	src, err := Open(ctx, from, opts)
	if err != nil {
		return nil, Summary{}, err
	}
	defer src.Close()
	r := &recorder{}
	sum, err := src.Read(ctx, r)
	return r, sum, err
}

// A page of keys whose values together exceed what the client takes in
// one answer is read again in smaller pages, every key once, in order; a
// single key over that limit is an error, not a loop.
func TestEtcdPagesShrinkToFit(t *testing.T) {
	etcd := framework.Start(t, framework.Etcd, framework.Options{})
	cli := etcd.Client(t)
	const n = 12
	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 1<<20) }
	for i := range n {
		if _, err := cli.Put(t.Context(), fmt.Sprintf("/big/%02d", i), string(value(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Every key fits alone; the first page of n keys is four times too big.
	r, sum, err := readAll(t, etcd.Endpoint(), Options{maxRecvMsgSize: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.kvs) != n || sum.Rev != n+1 {
		t.Fatalf("read %d keys at revision %d, want %d at %d", len(r.kvs), sum.Rev, n, n+1)
	}
	for i, kv := range r.kvs {
		if string(kv.Key) != fmt.Sprintf("/big/%02d", i) || !bytes.Equal(kv.Value, value(i)) {
			t.Errorf("key %d: %s (%d bytes)", i, kv.Key, len(kv.Value))
		}
	}

	_, _, err = readAll(t, etcd.Endpoint(), Options{maxRecvMsgSize: 512 << 10})
	if err == nil || !strings.Contains(err.Error(), `the key at or after "\x00" is alone over the 524288 bytes`) {
		t.Errorf("a key over the limit: %v", err)
	}
}

// The documented way to import from a kubeadm etcd: https:// with the
// etcd CA and a client certificate (docs/import.md), against an etcd that
// requires client certificates. Without the certificate it is refused.
func TestEtcdOverTLS(t *testing.T) {
	ca := framework.NewCA(t, "etcd-ca")
	serverCert, serverKey := ca.Issue(t, framework.CertSpec{CommonName: "etcd", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	clientCert, clientKey := ca.Issue(t, framework.CertSpec{CommonName: "healthcheck-client", Client: true})
	etcd := framework.Start(t, framework.Etcd, framework.Options{TLS: &framework.TLSFiles{
		CAFile: ca.CertFile, CertFile: serverCert, KeyFile: serverKey,
		ClientCert: clientCert, ClientKey: clientKey,
	}})
	if !strings.HasPrefix(etcd.Endpoint(), "https://") {
		t.Fatalf("etcd serves %s, want https://", etcd.Endpoint())
	}
	if _, err := etcd.Client(t).Put(t.Context(), "/registry/secrets/default/s", "v"); err != nil {
		t.Fatal(err)
	}
	files := tls.Config{CAFile: ca.CertFile, CertFile: clientCert, KeyFile: clientKey}
	hostPort := strings.TrimPrefix(etcd.Endpoint(), "https://")
	for _, from := range []string{etcd.Endpoint(), "etcd://" + hostPort} {
		r, _, err := readAll(t, from, Options{TLS: files})
		if err != nil {
			t.Fatalf("%s: %v", from, err)
		}
		if len(r.kvs) != 1 || string(r.kvs[0].Key) != "/registry/secrets/default/s" {
			t.Errorf("%s: read %v", from, r.kvs)
		}
	}
	if _, _, err := readAll(t, etcd.Endpoint(), Options{TLS: tls.Config{CAFile: ca.CertFile}}); err == nil {
		t.Error("read without a client certificate from an etcd that requires one")
	}
}

// SameDatabase finds a source named again as the target: the same SQLite
// file under any of its names, the same PostgreSQL database however its URL
// is written.
func TestSameDatabase(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, target string
		same         bool
	}{
		{file, "sqlite://" + file, true},
		{"sqlite://" + file + "?_journal=WAL", file, true},
		{file, "sqlite://" + link, true},
		{file, "sqlite://" + other, false},
		{filepath.Join(dir, "new.db"), "sqlite://" + filepath.Join(dir, "new.db"), true},
		{filepath.Join(dir, "new.db"), "sqlite://" + filepath.Join(dir, "new2.db"), false},
		{"postgres://k3s:secret@db:5432/kine?sslmode=require", "postgresql://quantykube@db/kine?sslmode=verify-full", true},
		{"postgres://k3s@db:5432/kine", "postgres://k3s@db:5432/quantykube", false},
		{"postgres://k3s@db:5432/kine", "postgres://k3s@db2:5432/kine", false},
		{"postgres://k3s@db/kine", "sqlite://kine", false},
		{"mysql://k3s:secret@tcp(db:3306)/kine", "mysql://quantykube@db/kine", true},
		{"mysql://k3s@tcp(db:3306)/kine", "mysql://k3s@db:3306/quantykube", false},
		{"mysql://k3s@tcp(db:3306)/kine", "postgres://k3s@db:3306/kine", false},
		{"etcd://127.0.0.1:2379", "sqlite://" + file, false},
	} {
		if got := SameDatabase(c.from, c.target); got != c.same {
			t.Errorf("SameDatabase(%q, %q) = %v, want %v", c.from, c.target, got, c.same)
		}
	}
}
