package history

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/tls"
	"github.com/quantyroot/quantykube/proto/historypb"

	"github.com/quantyroot/quantykube/test/framework"
)

// cliZone is the zone the CLI runs in: tables print local times.
const cliZone = "Asia/Kolkata" // +05:30, no daylight saving

type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs `quantykube history ARGS...` against e.
func (e *env) cli(args ...string) cliResult {
	e.t.Helper()
	// The first call builds the binary: not within the command's time limit.
	bin := framework.Binary(e.t)
	ctx, cancel := context.WithTimeout(testCtx(e.t), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"history"}, args...)...)
	cmd.Env = append(os.Environ(), "TZ="+cliZone)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("quantykube history %q: %v", args, err)
	}
	return res
}

// ok runs the CLI and fails unless it exits 0.
func (e *env) ok(args ...string) cliResult {
	e.t.Helper()
	r := e.cli(args...)
	if r.code != 0 {
		e.t.Fatalf("quantykube history %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

// fails runs the CLI, wants exit status 1 and returns stderr.
func (e *env) fails(args ...string) string {
	e.t.Helper()
	r := e.cli(args...)
	if r.code != 1 {
		e.t.Fatalf("quantykube history %q: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "rpc error") {
		e.t.Fatalf("quantykube history %q: raw gRPC error for people: %s", args, r.stderr)
	}
	return r.stderr
}

// table splits a table into rows of columns, checking its header.
func table(t *testing.T, out string, header ...string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(header, " ") {
		t.Fatalf("table header %q, want %q\n%s", got, header, out)
	}
	// Columns are aligned: each header starts where its values start.
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, splitAligned(t, lines[0], l, header))
	}
	return rows
}

// splitAligned cuts a row at the offsets of the header's columns, so
// values with spaces stay whole and misalignment shows.
func splitAligned(t *testing.T, head, row string, header []string) []string {
	t.Helper()
	var cols []string
	hr, rr := []rune(head), []rune(row)
	starts := make([]int, len(header))
	at := 0
	for i, h := range header {
		idx := strings.Index(string(hr[at:]), h)
		starts[i] = at + len([]rune(string(hr[at:])[:idx]))
		at = starts[i] + len([]rune(h))
	}
	for i := range header {
		end := len(rr)
		if i+1 < len(header) {
			end = starts[i+1]
		}
		if starts[i] > len(rr) || end > len(rr) || (starts[i] > 0 && rr[starts[i]-1] != ' ') {
			t.Fatalf("row %q is not aligned with header %q", row, head)
		}
		cols = append(cols, strings.TrimSpace(string(rr[starts[i]:end])))
	}
	return cols
}

// TestCLI runs the quantykube binary's history commands against a server:
// log, get and restore with tables and -o json, paging, TIME forms and
// the errors people see.
func TestCLI(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		e := startEnv(t, b, nil, nil)
		ep := "--endpoints=" + e.url
		zone, err := time.LoadLocation(cliZone)
		must(t, err)
		pause := func() { time.Sleep(5 * time.Millisecond) } // distinct commit times
		r1 := e.put("/cli/cm", "v1")
		pause()
		r2 := e.put("/cli/cm", "v2 with spaces")
		pause()
		r3, _ := e.del("/cli/cm")
		pause()
		e.put("/cli/bin", "k8s\x00\x01binary")
		pause()
		e.put("/cli0", "outside the prefix")
		pause()

		// log: a table, oldest first, in the local zone.
		entries, _ := e.logAll(&historypb.Request{Key: []byte("/cli/cm")}, 5)
		out := e.ok("log", "/cli/cm", ep).stdout
		rows := table(t, out, "REVISION", "TIME", "TYPE", "KEY", "VALUE")
		want := [][]string{
			{strconv.FormatInt(r1, 10), "", "CREATE", "/cli/cm", "v1"},
			{strconv.FormatInt(r2, 10), "", "PUT", "/cli/cm", "v2 with spaces"},
			{strconv.FormatInt(r3, 10), "", "DELETE", "/cli/cm", "-"},
		}
		if len(rows) != len(want) {
			t.Fatalf("log table:\n%s", out)
		}
		for i, row := range rows {
			want[i][1] = time.UnixMilli(entries[i].UnixMs).In(zone).Format("2006-01-02T15:04:05.000Z07:00")
			if strings.Join(row, "|") != strings.Join(want[i], "|") {
				t.Fatalf("log row %d = %q, want %q\n%s", i, row, want[i], out)
			}
			if !strings.HasSuffix(row[1], "+05:30") {
				t.Fatalf("log time %q is not in the local zone", row[1])
			}
		}

		// log -o json: protojson of one LogResponse, the same as the client's.
		out = e.ok("log", "/cli/cm", ep, "-o", "json").stdout
		var lr historypb.LogResponse
		if err := protojson.Unmarshal([]byte(out), &lr); err != nil {
			t.Fatalf("log -o json is not a LogResponse: %v\n%s", err, out)
		}
		if !proto.Equal(&historypb.LogResponse{Entries: entries}, &historypb.LogResponse{Entries: lr.Entries}) || lr.HeaderRevision < r3 || lr.Continue != "" {
			t.Fatalf("log -o json = %v, want entries %v", &lr, entries)
		}
		if !strings.Contains(out, `"unix_ms"`) || !strings.Contains(out, `"prev_kv"`) {
			t.Fatalf("log -o json does not use the spec's field names:\n%s", out)
		}

		// --prefix, and paging by --limit with --continue.
		out = e.ok("log", "/cli/", "--prefix", ep).stdout
		rows = table(t, out, "REVISION", "TIME", "TYPE", "KEY", "VALUE")
		if len(rows) != 4 || rows[3][3] != "/cli/bin" || rows[3][4] != "k8s… (11 bytes)" {
			t.Fatalf("log --prefix:\n%s", out)
		}
		res := e.ok("log", "/cli/", "--prefix", "--limit", "3", ep)
		if rows := table(t, res.stdout, "REVISION", "TIME", "TYPE", "KEY", "VALUE"); len(rows) != 3 {
			t.Fatalf("log --limit 3:\n%s", res.stdout)
		}
		m := regexp.MustCompile(`--continue (\S+)`).FindStringSubmatch(res.stderr)
		if m == nil {
			t.Fatalf("log --limit 3 does not say how to go on: %q", res.stderr)
		}
		out = e.ok("log", "/cli/", "--prefix", "--limit", "3", "--continue", m[1], ep).stdout
		if rows := table(t, out, "REVISION", "TIME", "TYPE", "KEY", "VALUE"); len(rows) != 1 || rows[0][3] != "/cli/bin" {
			t.Fatalf("log --continue:\n%s", out)
		}
		out = e.ok("log", "/cli/", "--range-end", "/cli/cn", "--rev", strconv.FormatInt(r2, 10), ep).stdout
		if rows := table(t, out, "REVISION", "TIME", "TYPE", "KEY", "VALUE"); len(rows) != 3 || rows[0][0] != strconv.FormatInt(r2, 10) {
			t.Fatalf("log --range-end --rev:\n%s", out)
		}
		out = e.ok("log", "/cli/cm", "--since", "-1h", ep).stdout
		if rows := table(t, out, "REVISION", "TIME", "TYPE", "KEY", "VALUE"); len(rows) != 3 {
			t.Fatalf("log --since -1h:\n%s", out)
		}

		// get: by revision, by a time as the log printed it, and now.
		out = e.ok("get", "/cli/cm", "--rev", strconv.FormatInt(r2, 10), ep).stdout
		rows = table(t, out, "REVISION", "KEY", "STATE", "CREATE_REV", "MOD_REV", "VERSION", "VALUE")
		if strings.Join(rows[0], "|") != strings.Join([]string{strconv.FormatInt(r2, 10), "/cli/cm", "PRESENT", strconv.FormatInt(r1, 10), strconv.FormatInt(r2, 10), "2", "v2 with spaces"}, "|") {
			t.Fatalf("get --rev:\n%s", out)
		}
		at := want[1][1] // the local time of r2 as the log table printed it
		out = e.ok("get", "/cli/cm", "--at", at, ep, "-o", "json").stdout
		var gr historypb.GetResponse
		if err := protojson.Unmarshal([]byte(out), &gr); err != nil {
			t.Fatalf("get -o json is not a GetResponse: %v\n%s", err, out)
		}
		direct := e.mustGet(&historypb.Request{Key: []byte("/cli/cm"), Revision: r2})
		if !proto.Equal(&gr, direct) {
			t.Fatalf("get --at %s -o json = %v, want %v", at, &gr, direct)
		}
		out = e.ok("get", "/cli/cm", "--at", "now", ep).stdout
		rows = table(t, out, "REVISION", "KEY", "STATE", "CREATE_REV", "MOD_REV", "VERSION", "VALUE")
		if rows[0][2] != "ABSENT" {
			t.Fatalf("get --at now after the delete:\n%s", out)
		}
		if out := e.ok("get", "/cli/bin", "-o", "value", ep).stdout; out != "k8s\x00\x01binary" {
			t.Fatalf("get -o value = %q", out)
		}

		// restore: the deleted key comes back with a new revision; again, it is
		// a no-op; to revision 1 it is a delete.
		out = e.ok("restore", "/cli/cm", "--rev", strconv.FormatInt(r2, 10), ep).stdout
		rows = table(t, out, "FROM_REV", "NEW_REV", "TYPE", "KEY", "CREATE_REV", "MOD_REV", "VERSION", "VALUE")
		newRev, _ := strconv.ParseInt(rows[0][1], 10, 64)
		if rows[0][2] != "PUT" || rows[0][0] != strconv.FormatInt(r2, 10) || newRev <= r3 || rows[0][7] != "v2 with spaces" {
			t.Fatalf("restore:\n%s", out)
		}
		gresp, err := e.etcd.Get(testCtx(t), "/cli/cm")
		must(t, err)
		if len(gresp.Kvs) != 1 || string(gresp.Kvs[0].Value) != "v2 with spaces" || gresp.Kvs[0].ModRevision != newRev {
			t.Fatalf("etcd after restore: %v", gresp.Kvs)
		}
		out = e.ok("restore", "/cli/cm", "--at", at, ep).stdout
		if rows := table(t, out, "FROM_REV", "NEW_REV", "TYPE", "KEY", "CREATE_REV", "MOD_REV", "VERSION", "VALUE"); rows[0][1] != "-" || rows[0][2] != "UNCHANGED" {
			t.Fatalf("restore to the current state:\n%s", out)
		}
		out = e.ok("restore", "/cli/cm", "--rev", "1", ep, "-o", "json").stdout
		var rr historypb.RestoreResponse
		if err := protojson.Unmarshal([]byte(out), &rr); err != nil {
			t.Fatalf("restore -o json is not a RestoreResponse: %v\n%s", err, out)
		}
		if rr.Revision != 1 || rr.Kv != nil || rr.NewRevision != e.rev() {
			t.Fatalf("restore --rev 1 -o json = %v", &rr)
		}

		// Errors people read: the server's OUT_OF_RANGE text, the endpoint
		// refused, a command line mistake.
		msg := e.fails("get", "/cli/cm", "--rev", "99999", ep)
		if !strings.Contains(msg, "99999") || !strings.Contains(msg, "future") {
			t.Fatalf("get --rev 99999: %q", msg)
		}
		msg = e.fails("get", "/cli/cm", "--at", "+1h", ep)
		if !strings.Contains(msg, "future") {
			t.Fatalf("get --at +1h: %q", msg)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		closed := l.Addr().String()
		l.Close()
		msg = e.fails("log", "/cli/cm", "--endpoints", closed)
		if !strings.Contains(msg, "cannot connect to "+closed+": connection refused") {
			t.Fatalf("refused: %q", msg)
		}
		for _, args := range [][]string{
			{"restore", "/cli/cm", ep},
			{"get", "/cli/cm", "--rev", "2", "--at", "-1m", ep},
			{"get", "/cli/cm", "--at", "15m", ep},
			{"log", "/cli/", "--prefix", "--range-end", "/x", ep},
			{"log", ep},
		} {
			if msg := e.fails(args...); msg == "" {
				t.Fatalf("%q: no message", args)
			}
		}
	})
}

// TestCLIUnixSocket: the CLI reaches a server on a unix socket.
func TestCLIUnixSocket(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		sock := filepath.Join(t.TempDir(), "qk.sock")
		e := startEnv(t, b, nil, func(cfg *endpoint.Config) { cfg.Listener = "unix://" + sock })
		rev := e.put("/u/k", "over a socket")
		out := e.ok("get", "/u/k", "--rev", strconv.FormatInt(rev, 10), "--endpoints", "unix://"+sock).stdout
		if rows := table(t, out, "REVISION", "KEY", "STATE", "CREATE_REV", "MOD_REV", "VERSION", "VALUE"); rows[0][6] != "over a socket" {
			t.Fatalf("get over unix socket:\n%s", out)
		}
	})
}

// TestCLITLS: with --trusted-ca-file the CLI verifies the server's
// certificate over https://; without it the handshake fails and says so.
func TestCLITLS(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		dir := t.TempDir()
		ca, cert, key := writeCerts(t, dir)
		e := startEnv(t, b, nil, func(cfg *endpoint.Config) { cfg.ServerTLSConfig = tls.Config{CertFile: cert, KeyFile: key} })
		if !strings.HasPrefix(e.url, "https://") {
			t.Fatalf("server URL %s is not https", e.url)
		}
		// The etcd client of env has no TLS; write through the CLI's own path
		// only: a get of the empty store at revision 1.
		out := e.ok("get", "/t/k", "--rev", "1", "--endpoints", e.url, "--trusted-ca-file", ca).stdout
		if rows := table(t, out, "REVISION", "KEY", "STATE", "CREATE_REV", "MOD_REV", "VERSION", "VALUE"); rows[0][2] != "ABSENT" {
			t.Fatalf("get over TLS:\n%s", out)
		}
		msg := e.fails("get", "/t/k", "--rev", "1", "--endpoints", e.url)
		if !strings.Contains(msg, "certificate") {
			t.Fatalf("TLS without the CA: %q", msg)
		}
	})
}

// writeCerts writes a CA and a server certificate for 127.0.0.1 it signed.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "history test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(t, err)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, err := x509.ParseCertificate(caDER)
	must(t, err)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	must(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("endpoint.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}
