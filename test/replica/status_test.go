package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// TestStatusShowsReplicasLag: each replica records in the database the
// revision it has applied, and `quantykube status --endpoint` lists both
// with the store's revision reached (lag 0) once the writes stop; a
// stopped replica's rows go with it, and the other's stay.
func TestStatusShowsReplicasLag(t *testing.T) {
	framework.Run(t, framework.Replicated, func(t *testing.T, b framework.Backend) {
		x := framework.Start(t, b, framework.Options{Process: true, Replicas: 2})
		bin := framework.Binary(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var last int64
		for i := range 20 {
			r, err := x.ReplicaClient(t, i%2).Put(ctx, fmt.Sprintf("/lag/%d", i%5), "v")
			if err != nil {
				t.Fatal(err)
			}
			last = r.Header.Revision
		}
		status := func(args ...string) []byte {
			t.Helper()
			out, err := exec.CommandContext(ctx, bin, append([]string{"status", "--endpoint", x.DSN()}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("status --endpoint: %v\n%s", err, out)
			}
			return out
		}
		read := func() mvcc.StoreStatus {
			t.Helper()
			var st mvcc.StoreStatus
			if out := status("-o", "json"); json.Unmarshal(out, &st) != nil {
				t.Fatalf("status -o json: %s", out)
			}
			return st
		}
		caughtUp := func(st mvcc.StoreStatus, n int) bool {
			if st.Rev != last || len(st.Servers) != n {
				return false
			}
			for _, s := range st.Servers {
				if !s.Recorded || s.Applied != last || s.Lag != 0 || s.Revision != last || s.AgeSeconds > 60 {
					return false
				}
			}
			return true
		}
		// Each records within serverRenew (10 s) of its revision moving.
		st := read()
		for deadline := time.Now().Add(40 * time.Second); !caughtUp(st, 2); st = read() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: replicas not at the store's revision %d in 40 s: %+v", b, last, st.Servers)
			}
			time.Sleep(500 * time.Millisecond)
		}
		text := string(status())
		for _, s := range st.Servers {
			if want := fmt.Sprintf("server/%s: revision %d of %d, lag 0, recorded ", s.ID, last, last); !strings.Contains(text, want) {
				t.Errorf("status --endpoint lacks %q:\n%s", want, text)
			}
		}

		x.StopReplica(t, 1)
		for deadline := time.Now().Add(30 * time.Second); !caughtUp(st, 1); st = read() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: a stopped replica's rows still listed after 30 s: %+v", b, st.Servers)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}
