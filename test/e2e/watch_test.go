package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

func byName(name string) string { return "metadata.name=" + name }

// checkWatch: a watch as `kubectl get -w` starts it (no resourceVersion)
// sees the object as it is, then its update (with the new data and
// revision) and its delete.
func checkWatch(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}, Data: map[string]string{"k": "before"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: byName("watched")})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	ev := nextEvent(t, w, "the initial state")
	if got, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || got.Data["k"] != "before" || got.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("first event: %s %+v, want ADDED with k=before at %s", ev.Type, ev.Object, cm.ResourceVersion)
	}
	patched, err := cms.Patch(ctx, "watched", types.MergePatchType, []byte(`{"data":{"k":"after"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	ev = nextEvent(t, w, "after the patch")
	got, ok := ev.Object.(*corev1.ConfigMap)
	if ev.Type != watch.Modified || !ok || got.Data["k"] != "after" || got.ResourceVersion != patched.ResourceVersion {
		t.Fatalf("after the patch: %s %+v, want MODIFIED with k=after at %s", ev.Type, ev.Object, patched.ResourceVersion)
	}
	if err := cms.Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	ev = nextEvent(t, w, "after the delete")
	if got, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Deleted || !ok || rv(t, got) <= rv(t, patched) {
		t.Fatalf("after the delete: %s %+v, want DELETED after revision %s", ev.Type, ev.Object, patched.ResourceVersion)
	}
}

// checkWatchResume: a watch started at an old resourceVersion replays what
// happened since, in order: two updates and the delete. On configmaps
// kube-apiserver replays from its watch cache; on podtemplates (no watch
// cache) its watch is QuantyKube's, started at that old revision.
func checkWatchResume(t *testing.T, c *Cluster) {
	for _, res := range []string{"configmaps", UncachedResource} {
		t.Run(res, func(t *testing.T) {
			ctx := c.Ctx(t)
			ns := c.Namespace(t)
			r := c.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: res}).Namespace(ns)
			obj := resumeObject(res)
			created, err := r.Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			var revs []int64
			cur := created
			for step := 1; step <= 2; step++ {
				cur.SetLabels(map[string]string{"step": fmt.Sprint(step)})
				if cur, err = r.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					t.Fatalf("update to step %d: %v", step, err)
				}
				revs = append(revs, rv(t, cur))
			}
			if err := r.Delete(ctx, "resumed", metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			w, err := r.Watch(ctx, metav1.ListOptions{FieldSelector: byName("resumed"), ResourceVersion: created.GetResourceVersion()})
			if err != nil {
				t.Fatalf("watch from %s: %v", created.GetResourceVersion(), err)
			}
			defer w.Stop()
			for i, step := range []string{"1", "2"} {
				ev := nextEvent(t, w, fmt.Sprintf("event %d of 3", i+1))
				u, ok := ev.Object.(*unstructured.Unstructured)
				if ev.Type != watch.Modified || !ok || u.GetLabels()["step"] != step || rv(t, u) != revs[i] {
					t.Fatalf("event %d: %s %v, want MODIFIED step=%s at %d", i+1, ev.Type, ev.Object, step, revs[i])
				}
			}
			ev := nextEvent(t, w, "event 3 of 3")
			if u, ok := ev.Object.(*unstructured.Unstructured); ev.Type != watch.Deleted || !ok || rv(t, u) <= revs[1] {
				t.Fatalf("event 3: %s %v, want DELETED after %d", ev.Type, ev.Object, revs[1])
			}
		})
	}
}

func resumeObject(resource string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1"}}
	switch resource {
	case "configmaps":
		u.SetKind("ConfigMap")
		u.Object["data"] = map[string]any{"k": "v"}
	default:
		u.SetKind("PodTemplate")
		u.Object["template"] = map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "c", "image": "example.invalid/pause:1"}},
		}}
	}
	u.SetName("resumed")
	u.SetLabels(map[string]string{"step": "0"})
	return u
}

// checkWatchStoreWrites: a change written straight into QuantyKube, through
// each replica in turn, reaches kube-apiserver's watch cache and so its
// clients, at the revision QuantyKube gave it. kube-apiserver keeps one
// watch per resource on one of its --etcd-servers, so with two replicas
// one of the two writes has to cross from one replica to the other.
func checkWatchStoreWrites(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "crossing"}, Data: map[string]string{"through": "kube-apiserver"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: byName("crossing"), ResourceVersion: cm.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	key := "/registry/configmaps/" + ns + "/crossing"
	for i := range c.QuantyKube.Replicas() {
		through := fmt.Sprintf("replica-%d", i)
		rev := storeUpdateConfigMap(t, ctx, c.QuantyKube.ReplicaClient(t, i), key, func(cm *corev1.ConfigMap) { cm.Data["through"] = through })
		ev := nextEvent(t, w, fmt.Sprintf("after the write through replica %d at revision %d", i, rev))
		got, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Modified || !ok || got.Data["through"] != through || rv(t, got) != rev {
			t.Fatalf("after the write through replica %d at revision %d: %s %+v, want MODIFIED through=%s", i, rev, ev.Type, ev.Object, through)
		}
		if got.UID != cm.UID {
			t.Errorf("uid %s, want %s", got.UID, cm.UID)
		}
	}
}

// storeUpdateConfigMap rewrites a ConfigMap in QuantyKube as kube-apiserver
// stores it (protobuf), behind kube-apiserver's back, and returns the
// revision of the write.
func storeUpdateConfigMap(t *testing.T, ctx context.Context, cli *clientv3.Client, key string, change func(*corev1.ConfigMap)) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s from QuantyKube: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("get %s from QuantyKube: %d keys, want 1", key, len(resp.Kvs))
	}
	kv := resp.Kvs[0]
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(kv.Value, nil, nil)
	if err != nil {
		t.Fatalf("decode %s: %v", key, err)
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		t.Fatalf("%s holds a %T", key, obj)
	}
	change(cm)
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(cm, &buf); err != nil {
		t.Fatalf("encode %s: %v", key, err)
	}
	// Only if nobody wrote it since the read, as kube-apiserver writes.
	txn, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpPut(key, buf.String())).
		Commit()
	if err != nil {
		t.Fatalf("write %s to QuantyKube: %v", key, err)
	}
	if !txn.Succeeded {
		t.Fatalf("write %s to QuantyKube: it changed since revision %d", key, kv.ModRevision)
	}
	return txn.Header.Revision
}
