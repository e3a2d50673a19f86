package history_test

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// Twenty Log requests at once, each with limit 10,000 over bigKey's 200
// revisions of 1 MiB, raise the process's peak RSS above its RSS at rest
// by at most three times their twenty answers: a request holds its page,
// not what its limit allows. Each answer is held encoded too, as gRPC
// holds it until it is sent, and until all twenty are done.
func TestConcurrentLogsStayNearTheirPages(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200 MiB")
	}
	_, svc := bigKeyStore(t)
	ctx := context.Background()
	req := &historypb.Request{Key: []byte(bigKey), Limit: 10000}
	// Statements prepared and connections opened, as on a server that has
	// served before.
	for range 4 {
		if _, err := svc.Log(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	rest := procStatus(t, "VmRSS")
	// The peak from here on (proc(5), clear_refs).
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	const clients = 20
	wire := make([][]byte, clients)
	var ready, done, exited sync.WaitGroup
	start, release := make(chan struct{}), make(chan struct{})
	for i := range clients {
		ready.Add(1)
		done.Add(1)
		exited.Go(func() {
			ready.Done()
			<-start
			resp, err := svc.Log(ctx, req)
			if err == nil {
				wire[i], err = proto.Marshal(resp)
			}
			if err != nil {
				t.Error(err)
			}
			done.Done()
			<-release
			runtime.KeepAlive(resp)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	peak := procStatus(t, "VmHWM")
	close(release)
	exited.Wait()
	pages := 0
	for _, w := range wire {
		pages += len(w)
	}
	rise := peak - rest
	t.Logf("RSS at rest %d MiB, peak %d MiB: %d MiB more for %d answers of %d MiB in all (%.2fx)",
		rest>>20, peak>>20, rise>>20, clients, pages>>20, float64(rise)/float64(pages))
	if rise > 3*int64(pages) {
		t.Errorf("%d concurrent Logs raised the peak RSS by %d bytes, over three times their answers' %d", clients, rise, pages)
	}
}

// procStatus is a field of /proc/self/status in bytes (VmRSS, VmHWM).
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if fields := strings.Fields(rest); ok && name == field && len(fields) > 0 {
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/self/status: no %s", field)
	return 0
}
