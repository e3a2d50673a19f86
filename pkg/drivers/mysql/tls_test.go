package mysql_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/quantyroot/quantykube/pkg/drivers/mysql"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	qtls "github.com/quantyroot/quantykube/pkg/tls"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/mytest"
)

// --datastore-cafile, -certfile and -keyfile reach a MariaDB that accepts
// TLS connections only: with the CA the store opens and its sessions are
// encrypted; without TLS, or with another CA, it does not open, and says
// why.
func TestTLSFiles(t *testing.T) {
	ca := framework.NewCA(t, "mariadb-ca")
	cert, key := ca.Issue(t, framework.CertSpec{CommonName: "mariadb", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	clientCert, clientKey := ca.Issue(t, framework.CertSpec{CommonName: "qk", Client: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := os.Stat(mytest.DefaultServer); err != nil {
		framework.Unavailable(t, "MariaDB", mytest.ErrUnavailable)
	}
	in, err := mytest.StartInstanceTLS(ctx, mytest.TLSFiles{CA: ca.CertFile, Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Destroy()
	dsn := in.DSN("qk_tls")

	open := func(t qtls.Config) (*mvcc.Store, error) {
		d, err := mysql.New(dsn, mysql.Options{TLS: t})
		if err != nil {
			return nil, err
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return mvcc.Open(octx, d, mvcc.Options{Logger: quiet})
	}
	s, err := open(qtls.Config{CAFile: ca.CertFile, CertFile: clientCert, KeyFile: clientKey})
	if err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	if _, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("k", "v")}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	d, err := mysql.New(dsn, mysql.Options{TLS: qtls.Config{CAFile: ca.CertFile}})
	if err != nil {
		t.Fatal(err)
	}
	w, r, err := d.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var name, cipher string
	if err := r.QueryRowContext(ctx, `SHOW SESSION STATUS LIKE 'Ssl_cipher'`).Scan(&name, &cipher); err != nil || cipher == "" {
		t.Errorf("a reader's session: cipher %q, %v; want TLS", cipher, err)
	}
	w.Close()
	r.Close()

	if _, err := open(qtls.Config{}); err == nil {
		t.Error("without TLS: the store opened on a server that requires it")
	}
	other := framework.NewCA(t, "another-ca")
	if _, err := open(qtls.Config{CAFile: other.CertFile}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("with another CA: %v, want a certificate error", err)
	}
}
