package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// seenEvent is one event a client watcher received.
type seenEvent struct {
	typ   watch.EventType
	name  string
	rv    int64
	value string
}

// watchRecorder keeps what one raw watch through kube-apiserver delivered:
// its events, its error events, and whether it ended.
type watchRecorder struct {
	mu     sync.Mutex
	events []seenEvent
	errs   []string
	ended  bool
}

// record reads w until it ends, in a goroutine of its own.
func (r *watchRecorder) record(w watch.Interface) {
	go func() {
		for ev := range w.ResultChan() {
			r.mu.Lock()
			switch o := ev.Object.(type) {
			case *corev1.ConfigMap:
				r.events = append(r.events, seenEvent{ev.Type, o.Name, rvOf(o), o.Data["v"]})
			case *metav1.Status:
				r.errs = append(r.errs, fmt.Sprintf("%d %s: %s", o.Code, o.Reason, o.Message))
			default:
				r.errs = append(r.errs, fmt.Sprintf("%s event of a %T", ev.Type, ev.Object))
			}
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.ended = true
		r.mu.Unlock()
	}()
}

func (r *watchRecorder) snapshot() (events []seenEvent, errs []string, ended bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seenEvent(nil), r.events...), append([]string(nil), r.errs...), r.ended
}

// informer is a client-go informer on a namespace's ConfigMaps, with the
// watch errors its reflector met.
type informer struct {
	inf  cache.SharedIndexInformer
	stop chan struct{}
	mu   sync.Mutex
	errs []string
}

func startInformer(t *testing.T, c *Cluster, ns string) *informer {
	t.Helper()
	lw := cache.NewListWatchFromClient(c.Kube.CoreV1().RESTClient(), "configmaps", ns, fields.Everything())
	in := &informer{inf: cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{}), stop: make(chan struct{})}
	if err := in.inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		in.mu.Lock()
		in.errs = append(in.errs, err.Error())
		in.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	go in.inf.Run(in.stop)
	t.Cleanup(func() { close(in.stop) })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), in.inf.HasSynced) {
		t.Fatal("the informer did not sync within a minute")
	}
	return in
}

func (in *informer) errors() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.errs...)
}

// state is the informer's cache: resourceVersion and data["v"] by name.
func (in *informer) state() map[string]objState {
	out := map[string]objState{}
	for _, o := range in.inf.GetStore().List() {
		cm := o.(*corev1.ConfigMap)
		out[cm.Name] = objState{rvOf(cm), cm.Data["v"]}
	}
	return out
}

// objState is what a client holds of one ConfigMap.
type objState struct {
	rv    int64
	value string
}

// apiState lists ns's ConfigMaps through kube-apiserver.
func apiState(ctx context.Context, c *Cluster, ns string) (map[string]objState, int64, error) {
	list, err := c.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	out := map[string]objState{}
	for _, cm := range list.Items {
		out[cm.Name] = objState{rvOf(&cm), cm.Data["v"]}
	}
	return out, rvOf(&list.ListMeta), nil
}

// diffStates says how got differs from want, "" when they are equal.
func diffStates(got, want map[string]objState) string {
	var d string
	for name, w := range want {
		if g, ok := got[name]; !ok {
			d += fmt.Sprintf(" missing %s@%d;", name, w.rv)
		} else if g != w {
			d += fmt.Sprintf(" %s@%d=%q, want @%d=%q;", name, g.rv, g.value, w.rv, w.value)
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			d += fmt.Sprintf(" extra %s@%d=%q;", name, g.rv, g.value)
		}
	}
	return d
}
