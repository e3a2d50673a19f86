package reaper_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/test/reaper"
)

// childEnv makes this test binary the process that starts a server and
// its reaper and is then killed (TestServerOfKilledProcessRemoved).
const childEnv = "QUANTY_REAPER_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		startAndWait(dir)
		return
	}
	os.Exit(m.Run())
}

// startAndWait starts a server (a sleep, in a process group of its own, as
// the database servers run) with its pid file in dir, and its reaper,
// says the server's pid, and waits to be killed (two minutes at most).
func startAndWait(dir string) {
	server := exec.Command("sleep", "300")
	server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := server.Start(); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	pidFile := filepath.Join(dir, "server.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(server.Process.Pid)+"\n"), 0o600); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	if _, err := reaper.Start(reaper.Server{Dir: dir, PIDFile: pidFile, Name: "sleep", Signal: "KILL"}); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println("SERVER", server.Process.Pid)
	time.Sleep(2 * time.Minute)
}

// A test process killed outright (go test's timeout, kill -9) runs no
// cleanup: its reaper still stops the server it named and removes the
// server's directory.
func TestServerOfKilledProcessRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "server")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 || f[0] != "SERVER" {
		_ = cmd.Process.Kill()
		t.Fatalf("the child started no server: %q, %v", line, err)
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, statErr := os.Stat(dir)
		gone := errors.Is(statErr, os.ErrNotExist)
		stopped := errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
		if gone && stopped {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("a minute after its test process was killed: directory removed %v, server %d stopped %v", gone, pid, stopped)
		}
	}
}
