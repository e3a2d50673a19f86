package e2e

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/restmapper"

	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// checkStorageLayout holds pkg/storagekey, the table the aggregated API
// authorizes with, against kube-apiserver v1.37 itself, both ways:
//   - one object of each kind in testdata/kinds.yaml, created through
//     kube-apiserver, is in QuantyKube at the key the table names;
//   - every key QuantyKube holds that the table maps to an object names a
//     resource kube-apiserver serves, with the same scope, and one object
//     of each such resource is readable through kube-apiserver under the
//     name the key gives; every other key is kube-apiserver's own
//     bookkeeping (/registry/ranges/..., /registry/peerserverleases/...).
func checkStorageLayout(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	tab := storagekey.New("")
	groups, err := restmapper.GetAPIGroupResources(c.Kube.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	etcd := c.QuantyKube.Client(t)

	b, err := os.ReadFile("testdata/kinds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%06x", rand.IntN(1<<24))
	b = bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("__NS__"), []byte(ns)), []byte("__N__"), []byte(suffix))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var created, unserved []string
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			unserved = append(unserved, gvk.String())
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
		res := c.Dynamic.Resource(m.Resource)
		if namespaced {
			_, err = res.Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{})
		} else {
			_, err = res.Create(ctx, obj, metav1.CreateOptions{})
			name := obj.GetName()
			t.Cleanup(func() { _ = res.Delete(ctx, name, metav1.DeleteOptions{}) })
		}
		if err != nil {
			t.Errorf("create %s %s: %v", gvk.Kind, obj.GetName(), err)
			continue
		}
		o := storagekey.Object{Resource: storagekey.Resource{Group: m.Resource.Group, Resource: m.Resource.Resource, Namespaced: namespaced},
			Namespace: obj.GetNamespace(), Name: obj.GetName()}
		if !namespaced {
			o.Namespace = ""
		}
		key, err := tab.Key(o)
		if err != nil {
			t.Errorf("%s: %v", gvk.Kind, err)
			continue
		}
		got, err := etcd.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if got.Count != 1 {
			t.Errorf("%s %s: not in QuantyKube at %s, where pkg/storagekey puts it", gvk.Kind, o, key)
			continue
		}
		created = append(created, o.Resource.String())
	}
	t.Logf("%d kinds created and found at their keys; not served here: %v", len(created), unserved)

	// The other way: everything QuantyKube holds.
	all, err := etcd.Get(ctx, tab.Prefix()+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	first := map[storagekey.Resource]storagekey.Object{}
	var raw []string
	for _, kv := range all.Kvs {
		o, ok := tab.Parse(kv.Key)
		if !ok {
			raw = append(raw, string(kv.Key))
			continue
		}
		if _, seen := first[o.Resource]; !seen {
			first[o.Resource] = o
		}
	}
	for _, k := range raw {
		// Allocation bitmaps, and the leases kube-apiservers keep of their
		// peers: no API serves either.
		if !strings.HasPrefix(k, tab.Prefix()+"/ranges/") && !strings.HasPrefix(k, tab.Prefix()+"/peerserverleases/") {
			t.Errorf("QuantyKube holds %s, which pkg/storagekey maps to no object", k)
		}
	}
	resources := make([]storagekey.Resource, 0, len(first))
	for r := range first {
		resources = append(resources, r)
	}
	sort.Slice(resources, func(i, j int) bool { return resources[i].String() < resources[j].String() })
	for _, r := range resources {
		o := first[r]
		gvr, err := mapper.ResourceFor(schema.GroupVersionResource{Group: r.Group, Resource: r.Resource})
		if err != nil {
			t.Errorf("key of %s: kube-apiserver serves no such resource: %v", o, err)
			continue
		}
		m, err := mapper.RESTMapping(schema.GroupKind{Group: gvr.Group, Kind: mustKind(t, mapper, gvr)}, gvr.Version)
		if err != nil {
			t.Errorf("%s: %v", o, err)
			continue
		}
		if (m.Scope.Name() == meta.RESTScopeNameNamespace) != r.Namespaced {
			t.Errorf("%s: pkg/storagekey says namespaced %v, kube-apiserver %s", r, r.Namespaced, m.Scope.Name())
			continue
		}
		res := c.Dynamic.Resource(gvr)
		if r.Namespaced {
			_, err = res.Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		} else {
			_, err = res.Get(ctx, o.Name, metav1.GetOptions{})
		}
		// An object may go between the two reads (an Event expiring, a
		// lease); the next one of its resource would do as well, but a
		// NotFound for one that is still stored is the table's error.
		if apierrors.IsNotFound(err) {
			key, _ := tab.Key(o)
			if got, gerr := etcd.Get(ctx, key, clientv3.WithCountOnly()); gerr == nil && got.Count == 0 {
				continue
			}
		}
		if err != nil {
			t.Errorf("%s is stored but kube-apiserver cannot read it under that name: %v", o, err)
		}
	}
	t.Logf("%d keys; %d resources mapped and read back; %d bookkeeping keys", len(all.Kvs), len(resources), len(raw))
}

func mustKind(t *testing.T, m meta.RESTMapper, gvr schema.GroupVersionResource) string {
	t.Helper()
	gvk, err := m.KindFor(gvr)
	if err != nil {
		t.Fatalf("kind of %s: %v", gvr, err)
	}
	return gvk.Kind
}
