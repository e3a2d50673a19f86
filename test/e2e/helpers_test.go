package e2e

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// eventually polls cond every interval until it reports true, and fails t
// with what and cond's last error when timeout passes first.
func eventually(t *testing.T, ctx context.Context, timeout, interval time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s (last error: %v)", what, timeout, last)
	}
}

// eventWait bounds the wait for one watch event.
const eventWait = 30 * time.Second

// nextEvent is the watch's next event, failing t (saying what it waited
// for) when none comes within eventWait or the watch ends.
func nextEvent(t *testing.T, w watch.Interface, what string) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("%s: the watch closed before the next event", what)
		}
		if ev.Type == watch.Error {
			t.Fatalf("%s: watch error: %v", what, ev.Object)
		}
		return ev
	case <-time.After(eventWait):
		t.Fatalf("%s: no watch event within %s", what, eventWait)
	}
	panic("unreachable")
}

// rv is an object's resourceVersion as the revision it is: kube-apiserver
// sets it to the etcd mod_revision of the object's key.
func rv(t *testing.T, obj metav1.Object) int64 {
	t.Helper()
	n, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("%s: resourceVersion %q is not a revision: %v", obj.GetName(), obj.GetResourceVersion(), err)
	}
	return n
}

// names are the objects' names, in order.
func names[T any, P interface {
	*T
	metav1.Object
}](items []T) []string {
	out := make([]string, len(items))
	for i := range items {
		out[i] = P(&items[i]).GetName()
	}
	return out
}

// storeKeys counts the keys under prefix in QuantyKube, read directly
// through its etcd API (first replica), not through kube-apiserver.
func storeKeys(t *testing.T, c *Cluster, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := c.QuantyKube.Client(t).Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count %s in QuantyKube: %v", prefix, err)
	}
	return resp.Count
}

// metric sums the samples of a kube-apiserver metric whose labels include
// every label given: a reading of /metrics in the text format.
func metric(t *testing.T, c *Cluster, name string, labels map[string]string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	raw, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		n, l, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		match := true
		for k, v := range labels {
			if !strings.Contains(","+strings.TrimSuffix(l, "}")+",", ","+k+"="+strconv.Quote(v)+",") {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += f
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return sum
}
