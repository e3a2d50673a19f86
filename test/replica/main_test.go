// Package replica tests QuantyKube on PostgreSQL with several processes on
// one database, and PostgreSQL going away under load. It needs PostgreSQL:
// QUANTY_TEST_POSTGRES_DSN, or a throwaway cluster from the server binaries
// (the restart test needs the throwaway cluster: it stops and starts it).
// Without either the tests are skipped loudly, and fail under CI=true.
package replica

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quantyroot/quantykube/test/pgtest"
	"github.com/quantyroot/quantykube/test/testutil"
)

var (
	serverBin string
	pg        *pgtest.Server
	pgErr     error
)

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "quantykube-replica-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "replica: %v\n", err)
		os.Exit(1)
	}
	serverBin = filepath.Join(tmp, "quantykube")
	if err := testutil.BuildServer(serverBin); err != nil {
		fmt.Fprintf(os.Stderr, "replica: %v\n", err)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	pg, pgErr = pgtest.Open(ctx)
	cancel()
	code := m.Run()
	if pg != nil {
		pg.Close()
	}
	os.RemoveAll(tmp)
	os.Exit(code)
}

// needPostgres skips (or under CI fails) a test when there is no PostgreSQL.
func needPostgres(t *testing.T, cluster bool) {
	t.Helper()
	msg := ""
	switch {
	case pgErr != nil:
		msg = pgErr.Error()
	case cluster && pg.Cluster == nil:
		msg = "this test stops and starts PostgreSQL: it needs the throwaway cluster, not " + pgtest.EnvDSN
	}
	if msg == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("POSTGRES TEST NOT RUN under CI=true: %s", msg)
	}
	fmt.Fprintf(os.Stderr, "\n##########\n## POSTGRES TEST SKIPPED: %s: %s\n##########\n", t.Name(), msg)
	t.Skip("POSTGRES TEST SKIPPED: " + msg)
}

// logTail is how much of a process's log a failure shows.
const logTail = 6000

// proc is one quantykube process.
type proc struct {
	t      *testing.T
	name   string
	addr   string
	cmd    *exec.Cmd
	log    *testutil.LogBuffer
	exited chan struct{}
}

// startProc starts quantykube serving dsn and waits until it answers.
func startProc(t *testing.T, name, dsn string, extra ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, addr: testutil.FreeAddr(t), log: &testutil.LogBuffer{}, exited: make(chan struct{})}
	args := append([]string{"serve", "--listen-address", p.addr, "--endpoint", dsn}, extra...)
	p.cmd = exec.Command(serverBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", name, p.log.Tail(logTail))
		}
	})
	cli := p.client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Status(ctx, "http://"+p.addr)
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited at start:\n%s", name, p.log.Tail(logTail))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v\n%s", name, err, p.log.Tail(logTail))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *proc) client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + p.addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func newDatabase(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := pgtest.CreateDatabase(ctx, pg.AdminDSN, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pgtest.DropDatabase(ctx, pg.AdminDSN, dsn)
	})
	return dsn
}
