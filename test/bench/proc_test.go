package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// burnEnv makes the test binary a child that uses this much CPU and exits
// (TestMain), so that treeCPU has a child to count.
const burnEnv = "QUANTY_BENCH_TEST_BURN"

func TestMain(m *testing.M) {
	if d, err := time.ParseDuration(os.Getenv(burnEnv)); err == nil {
		burn(d)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// burn spins until the process has used d of CPU, bounded at a minute of
// wall time so that a machine too busy to give it d cannot hang the test.
func burn(d time.Duration) {
	deadline := time.Now().Add(time.Minute)
	x := 0
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
		if used, err := cpuTime(os.Getpid()); err != nil || used >= d {
			break
		}
	}
	_ = x
}

// TestTreeCPUCountsChildren: a PostgreSQL cluster's CPU is its postmaster's
// children's, live and exited, and the benchmark charges it to the server.
func TestTreeCPUCountsChildren(t *testing.T) {
	before, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	const use = 300 * time.Millisecond
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), burnEnv+"="+use.String())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Live: once the child has used some CPU, the tree counts it.
	var live time.Duration
	for range 600 {
		if live, err = cpuTime(cmd.Process.Pid); err != nil || live >= 100*time.Millisecond {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if live < 100*time.Millisecond {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child used %v of CPU in 6 s (%v)", live, err)
	}
	during, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if during-before < live {
		t.Errorf("while the child ran, the tree's CPU grew by %v; the child alone had used %v", during-before, live)
	}
	// Exited and waited for: its CPU moves to the parent's reaped time.
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	after, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts user and system time each in 10 ms ticks, so the two
	// may lose up to 20 ms together; the child's rusage is exact.
	if after-before < child-20*time.Millisecond {
		t.Errorf("after the child exited, the tree's CPU grew by %v; the child used %v", after-before, child)
	}
	if child < use {
		t.Errorf("the child used %v of CPU, asked for %v", child, use)
	}
}
