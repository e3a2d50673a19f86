package pgtest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

// childEnv makes this test binary the process that opens a cluster and is
// then killed (TestClusterOfKilledProcessRemoved).
const childEnv = "QUANTY_PGTEST_REAP_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		openAndWait()
		return
	}
	os.Exit(m.Run())
}

// openAndWait opens a throwaway cluster, says where it is, and waits to be
// killed (for two minutes at most).
func openAndWait() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgtest.Open(ctx)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	pid, err := os.ReadFile(srv.Cluster.Dir + "/data/postmaster.pid")
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("CLUSTER", srv.Cluster.Dir, strings.SplitN(string(pid), "\n", 2)[0])
	<-ctx.Done()
	srv.Close()
}

// TestClusterOfKilledProcessRemoved: a test binary killed outright (go
// test's timeout, kill -9) runs no cleanup; its throwaway PostgreSQL must
// still stop and its directory go.
func TestClusterOfKilledProcessRemoved(t *testing.T) {
	if os.Getenv(pgtest.EnvDSN) != "" {
		framework.Unavailable(t, "PostgreSQL cluster", fmt.Errorf("%s names a server: no throwaway cluster to reap", pgtest.EnvDSN))
	}
	if _, err := os.Stat(pgtest.DefaultBin + "/initdb"); err != nil && os.Getenv(pgtest.EnvBin) == "" {
		framework.Unavailable(t, "PostgreSQL", pgtest.ErrUnavailable)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the child said nothing: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "CLUSTER" {
		_ = cmd.Process.Kill()
		t.Fatalf("the child could not open a cluster: %s", line)
	}
	dir := f[1]
	pid, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatalf("postmaster pid %q: %v", f[2], err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the cluster's postmaster (pid %d) is not running: %v", pid, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(time.Minute)
	for {
		_, statErr := os.Stat(dir)
		gone := errors.Is(statErr, os.ErrNotExist)
		stopped := errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
		if gone && stopped {
			return
		}
		if time.Now().After(deadline) {
			// Leave nothing behind for the next run either.
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			os.RemoveAll(dir)
			t.Fatalf("a minute after its test process was killed, the cluster is still there: directory removed %v, postmaster %d stopped %v", gone, pid, stopped)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
