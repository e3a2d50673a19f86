package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// drillWrite is one write the drill's writer sent through kube-apiserver:
// the value it gave the ConfigMap's data["v"] (unique per write) and, once
// acknowledged, the resourceVersion kube-apiserver answered and when.
type drillWrite struct {
	name  string
	value string
	rv    int64
	acked time.Time
}

// ledger is what the writer sent, by value, and in order per object: the
// client's log the restored store is checked against.
type ledger struct {
	mu      sync.Mutex
	byValue map[string]*drillWrite
	writes  []*drillWrite
}

func newLedger() *ledger { return &ledger{byValue: map[string]*drillWrite{}} }

func (l *ledger) sent(name, value string) *drillWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &drillWrite{name: name, value: value}
	l.byValue[value] = w
	l.writes = append(l.writes, w)
	return w
}

func (l *ledger) ack(w *drillWrite, rv int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.rv, w.acked = rv, at
}

// lookup is the write that gave value, nil when the writer never sent it.
func (l *ledger) lookup(value string) *drillWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byValue[value]
}

// acked are the acknowledged writes, oldest first per writer.
func (l *ledger) acked() []drillWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []drillWrite
	for _, w := range l.writes {
		if w.rv != 0 {
			out = append(out, *w)
		}
	}
	return out
}

// runWriters writes ConfigMaps through kube-apiserver from `workers`
// goroutines, each creating its own objects and then updating them in
// turn, until stop is closed, a write fails (the kill), or maxOps each.
// It returns when they have all stopped.
func runWriters(ctx context.Context, c *Cluster, ns string, l *ledger, stop <-chan struct{}, workers, objects, maxOps int) {
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			live := make([]*corev1.ConfigMap, objects)
			for op := range maxOps {
				select {
				case <-stop:
					return
				default:
				}
				i := op % objects
				name := fmt.Sprintf("drill-%d-%02d", wk, i)
				value := fmt.Sprintf("%s#%d", name, op/objects)
				w := l.sent(name, value)
				var got *corev1.ConfigMap
				var err error
				if live[i] == nil {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}
					got, err = cms.Create(ctx, cm, metav1.CreateOptions{})
				} else {
					cm := live[i].DeepCopy()
					cm.Data = map[string]string{"v": value}
					got, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
				}
				if err != nil {
					return // QuantyKube is gone: the outcome of w is unknown
				}
				l.ack(w, rvOf(got), time.Now())
				live[i] = got
			}
		}()
	}
	wg.Wait()
}

// rvOf is a resourceVersion as the revision it is (0 if it is none).
func rvOf(o interface{ GetResourceVersion() string }) int64 {
	var n int64
	fmt.Sscan(o.GetResourceVersion(), &n)
	return n
}

// storeConfigMap decodes a ConfigMap as kube-apiserver stores it.
func storeConfigMap(value []byte) (*corev1.ConfigMap, error) {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(value, nil, nil)
	if err != nil {
		return nil, err
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("holds a %T", obj)
	}
	return cm, nil
}

// storeHistory reads, through QuantyKube's History API, every change
// under prefix in revisions (from, to], oldest first, and checks each
// against the ledger: a put holds a value the writer sent for that object,
// at the revision it was acknowledged at if it was. It returns the
// revisions of the puts by value. History, not an etcd watch: restore
// --from marks the store compacted below its bumped revision, so the etcd
// API refuses revisions before it, and History keeps its rows.
func storeHistory(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, from, to int64, l *ledger) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hc := historypb.NewHistoryClient(cli.ActiveConnection())
	req := &historypb.Request{Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)), Revision: from + 1, EndRevision: to, Limit: 1000}
	seen := map[string]int64{}
	for {
		resp, err := hc.Log(ctx, req)
		if err != nil {
			t.Fatalf("history of %s from revision %d: %v", prefix, req.Revision, err)
		}
		for _, e := range resp.Entries {
			if e.Revision > to {
				return seen
			}
			if e.Deleted != 0 {
				t.Errorf("revision %d deletes %s: the writer deleted nothing", e.Revision, e.Kv.GetKey())
				continue
			}
			cm, err := storeConfigMap(e.Kv.GetValue())
			if err != nil {
				t.Errorf("revision %d: %s: %v", e.Revision, e.Kv.GetKey(), err)
				continue
			}
			w := l.lookup(cm.Data["v"])
			switch {
			case w == nil || w.name != cm.Name:
				t.Errorf("revision %d: %s holds %q, which the writer never sent: invented", e.Revision, e.Kv.GetKey(), cm.Data["v"])
			case w.rv != 0 && w.rv != e.Revision:
				t.Errorf("revision %d: %s holds %q, acknowledged at resourceVersion %d", e.Revision, e.Kv.GetKey(), w.value, w.rv)
			}
			seen[cm.Data["v"]] = e.Revision
		}
		if resp.Continue == "" {
			return seen
		}
		req.Continue = resp.Continue
	}
}
