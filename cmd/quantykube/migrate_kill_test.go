package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// migrateKilled runs the quantykube binary's migrate from src to dst,
// stopped after its third batch (migrateStopEnv), and kills it with
// SIGKILL there: the target then holds part of the log.
func migrateKilled(t *testing.T, src, dst string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, framework.Binary(t), "migrate", "--from", src, "--to", dst, "--batch-rows", "100")
	cmd.Env = append(os.Environ(), migrateStopEnv+"=3")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	sc := bufio.NewScanner(stderr)
	stopped := false
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "stopped after 3 batches") {
			stopped = true
			break
		}
	}
	if !stopped {
		cmd.Wait()
		t.Fatalf("migrate did not stop after 3 batches:\n%s", seen.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stderr)
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("migrate was not killed: %v", err)
	}
	t.Logf("migrate killed after:\n%s", seen.String())
}

// A migrate killed (SIGKILL) after three of its batches leaves a target
// that `quantykube serve` refuses, saying to run migrate again; a second
// migrate starts over and completes it, equal to the source in check hash
// over all its history; a third is refused, the target being full.
func TestMigrateKilledMidCopy(t *testing.T) {
	for _, b := range []framework.Backend{framework.SQLite, framework.Postgres, framework.MySQL} {
		t.Run(string(b), func(t *testing.T) {
			framework.Require(t, b)
			ctx := t.Context()
			src := framework.Start(t, framework.SQLite, framework.Options{})
			cli := src.Client(t)
			// 1,000 log rows in 20 revisions: ten batches of 100.
			for r := range 20 {
				var ops []clientv3.Op
				for k := range 50 {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/k/%03d", (r*50+k)%700), fmt.Sprint("v", r)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					t.Fatal(err)
				}
			}
			src.Stop(t)
			want, err := checkHash(t, "--endpoint", src.DSN(), "--history-from", "0")
			if err != nil {
				t.Fatal(err)
			}
			target := framework.Start(t, b, framework.Options{})
			target.Stop(t)

			migrateKilled(t, src.DSN(), target.DSN())
			ctx2, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx2, framework.Binary(t), "serve", "--endpoint", target.DSN(), "--listen-address", framework.FreeAddr(t)).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "did not finish") || !strings.Contains(string(out), "run the same quantykube migrate again") {
				t.Fatalf("serve on the half-migrated target: %v\n%s\nwant it refused, saying to rerun migrate", err, out)
			}

			other := "sqlite://" + filepath.Join(t.TempDir(), "other.db")
			if _, err := runMigrate(t, target.DSN(), other); err == nil || !strings.Contains(err.Error(), "did not finish") {
				t.Fatalf("a migrate from the half-migrated target: %v, want it refused", err)
			}
			if _, err := runMigrate(t, src.DSN(), target.DSN()); err != nil {
				t.Fatalf("migrate again: %v", err)
			}
			got, err := checkHash(t, "--endpoint", target.DSN(), "--history-from", "0")
			if err != nil {
				t.Fatal(err)
			}
			if got.Hash != want.Hash || got.Revision != want.Revision || got.Changes != want.Changes || got.Changes != 1000 {
				t.Fatalf("after the second migrate: %+v, want the source's %+v", got, want)
			}
			if _, err := runMigrate(t, src.DSN(), target.DSN()); err == nil || !strings.Contains(err.Error(), "not empty") {
				t.Fatalf("a migrate onto the full target: %v, want it refused", err)
			}
			target.Start(t)
			resp, err := target.Client(t).Get(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || resp.Count != 700 || resp.Header.Revision != want.Revision {
				t.Fatalf("the migrated store: %v, %v; want 700 keys at revision %d", resp, err, want.Revision)
			}
		})
	}
}
