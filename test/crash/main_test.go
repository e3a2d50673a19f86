package crash

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quantyroot/quantykube/test/testutil"
)

const (
	envBin  = "QUANTY_CRASH_BIN"
	envArgs = "QUANTY_CRASH_ARGS"

	defaultArgs = "serve --listen-address {addr} --endpoint sqlite://{db}"
)

// serverBin is the binary under test, set by TestMain.
var serverBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	tmp, err := os.MkdirTemp("", "quantykube-crash-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "crash: temp dir: %v\n", err)
		os.Exit(1)
	}
	serverBin = os.Getenv(envBin)
	if serverBin == "" {
		serverBin = filepath.Join(tmp, "quantykube")
		if err := testutil.BuildServer(serverBin); err != nil {
			fmt.Fprintf(os.Stderr, "crash: %v\n", err)
			_ = os.RemoveAll(tmp)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

// serverProc is one run of the server process.
type serverProc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	err    error // Wait's result, valid once exited is closed
}

// cluster is the server under test across its restarts: one data directory,
// one log file, a new process (and client port) per start.
type cluster struct {
	t    *testing.T
	dir  string
	peer string
	log  *os.File
	args []string
	proc *serverProc
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	base := t.TempDir()
	c := &cluster{t: t, dir: filepath.Join(base, "data"), peer: testutil.FreeAddr(t)}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		t.Fatalf("data dir: %v", err)
	}
	f, err := os.Create(filepath.Join(base, "server.log"))
	if err != nil {
		t.Fatalf("log file: %v", err)
	}
	c.log = f
	tmpl := os.Getenv(envArgs)
	if tmpl == "" {
		tmpl = defaultArgs
	}
	c.args = strings.Fields(tmpl)
	t.Cleanup(func() {
		c.stop()
		if t.Failed() {
			t.Logf("server log (tail):\n%s", c.logTail(6000))
		}
		_ = c.log.Close()
	})
	return c
}

func (c *cluster) logTail(n int64) string {
	st, err := c.log.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := c.log.ReadAt(b, off); err != nil {
		return fmt.Sprintf("(reading log: %v)", err)
	}
	return string(b)
}

func (c *cluster) expand(addr string) []string {
	r := strings.NewReplacer("{addr}", addr, "{peer}", c.peer, "{db}", filepath.Join(c.dir, "state.db"), "{dir}", c.dir)
	out := make([]string, len(c.args))
	for i, a := range c.args {
		out[i] = r.Replace(a)
	}
	return out
}

// start starts the server on the data directory and waits until it answers.
// A port lost to a race between FreeAddr and the server's bind is retried.
func (c *cluster) start(label string) {
	c.t.Helper()
	if c.proc != nil {
		c.t.Fatalf("start: server already running")
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr := testutil.FreeAddr(c.t)
		args := c.expand(addr)
		fmt.Fprintf(c.log, "\n===== %s: %s %s\n", label, serverBin, strings.Join(args, " "))
		cmd := exec.Command(serverBin, args...)
		cmd.Stdout, cmd.Stderr = c.log, c.log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			c.t.Fatalf("start %s: %v", serverBin, err)
		}
		p := &serverProc{cmd: cmd, addr: addr, exited: make(chan struct{})}
		go func() { p.err = cmd.Wait(); close(p.exited) }()
		c.proc = p
		if lastErr = c.waitReady(p); lastErr == nil {
			return
		}
		c.kill()
	}
	c.t.Fatalf("%s: server did not become ready: %v\nserver log (tail):\n%s", label, lastErr, c.logTail(4000))
}

func (c *cluster) waitReady(p *serverProc) error {
	cli, err := newClient(p.addr)
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("server exited: %v", p.err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "/crash-ready-probe")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL to the running server and waits for it to exit.
func (c *cluster) kill() {
	c.t.Helper()
	p := c.proc
	if p == nil {
		return
	}
	c.proc = nil
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("server pid %d did not exit 10s after SIGKILL", p.cmd.Process.Pid)
	}
}

// stop ends the server gracefully (SIGTERM, then SIGKILL after 10 s).
func (c *cluster) stop() {
	p := c.proc
	if p == nil {
		return
	}
	c.proc = nil
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

func newClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            []string{addr},
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
}

// quoteVal shortens a value for messages.
func quoteVal(v string) string {
	if i := bytes.IndexByte([]byte(v), '|'); i >= 0 {
		v = v[:i]
	}
	return fmt.Sprintf("%q", v)
}
