package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

// A migrate beside a server that keeps writing copies one consistent
// snapshot: the target's revision is one the source had, and check hash
// over all of history agrees with the source's at that revision. On each
// database as the source (the read transaction is the dialect's).
func TestMigrateLiveSourceIsOneSnapshot(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		ctx := t.Context()
		src := framework.Start(t, b, framework.Options{})
		cli := src.Client(t)
		for i := range 300 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/k/%03d", i%120), fmt.Sprint("v", i)); err != nil {
				t.Fatal(err)
			}
		}
		wctx, stop := context.WithCancel(ctx)
		done := make(chan int)
		go func() {
			n := 0
			for wctx.Err() == nil {
				if _, err := cli.Put(wctx, fmt.Sprintf("/w/%03d", n%50), fmt.Sprint("w", n)); err == nil {
					n++
				}
			}
			done <- n
		}()
		dst := "sqlite://" + filepath.Join(t.TempDir(), "state.db")
		_, err := runMigrate(t, src.DSN(), dst)
		stop()
		writes := <-done
		if err != nil {
			t.Fatal(err)
		}
		got, err := checkHash(t, "--endpoint", dst, "--history-from", "0")
		if err != nil {
			t.Fatal(err)
		}
		want, err := checkHash(t, "--endpoint", src.DSN(), "--revision", fmt.Sprint(got.Revision), "--history-from", "0")
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash != want.Hash || got.Changes != want.Changes {
			t.Fatalf("the target at revision %d: %s over %d changes; the source at that revision: %s over %d", got.Revision, got.Hash, got.Changes, want.Hash, want.Changes)
		}
		latest, err := checkHash(t, "--endpoint", src.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d writes during the migrate; copied revision %d of %d", writes, got.Revision, latest.Revision)
		if got.Revision < 301 || writes == 0 {
			t.Fatalf("copied revision %d with %d writes beside it: want at least the 300 puts before", got.Revision, writes)
		}
	})
}
