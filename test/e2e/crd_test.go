package e2e

import (
	"context"
	_ "embed"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"
)

//go:embed testdata/crd-widget.yaml
var widgetCRD []byte

var (
	crdResource    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	widgetResource = schema.GroupVersionResource{Group: "e2e.quantykube.io", Version: "v1", Resource: "widgets"}
)

const widgetCRDName = "widgets.e2e.quantykube.io"

func widget(name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "e2e.quantykube.io/v1",
		"kind":       "Widget",
		"spec":       map[string]any{"size": size, "color": "red"},
	}}
	u.SetName(name)
	u.SetLabels(map[string]string{"e2e": "widget"})
	return u
}

// checkCRD: a CustomResourceDefinition becomes Established and
// discoverable; its objects are created, listed, validated against the
// schema, updated, watched and deleted; the status subresource keeps
// status and spec apart; deleting the definition deletes its remaining
// objects from QuantyKube.
func checkCRD(t *testing.T, c *Cluster) {
	ctx := c.Ctx(t)
	ns := c.Namespace(t)
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(widgetCRD, &crd.Object); err != nil {
		t.Fatalf("testdata/crd-widget.yaml: %v", err)
	}
	crds := c.Dynamic.Resource(crdResource)
	if _, err := crds.Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := crds.Delete(ctx, widgetCRDName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete CRD: %v", err)
		}
	})
	eventually(t, ctx, time.Minute, 250*time.Millisecond, "CRD Established", func(ctx context.Context) (bool, error) {
		u, err := crds.Get(ctx, widgetCRDName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	eventually(t, ctx, 30*time.Second, 250*time.Millisecond, "widgets in discovery", func(ctx context.Context) (bool, error) {
		rl, err := c.Kube.Discovery().ServerResourcesForGroupVersion("e2e.quantykube.io/v1")
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "widgets" && r.Namespaced }), nil
	})

	widgets := c.Dynamic.Resource(widgetResource).Namespace(ns)
	for _, name := range []string{"widget-1", "widget-2", "widget-3"} {
		if _, err := widgets.Create(ctx, widget(name, 1), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	list, err := widgets.List(ctx, metav1.ListOptions{LabelSelector: "e2e=widget"})
	if err != nil {
		t.Fatalf("list widgets: %v", err)
	}
	if got := names(list.Items); !slices.Equal(got, []string{"widget-1", "widget-2", "widget-3"}) {
		t.Errorf("list widgets: %v", got)
	}
	if _, err := widgets.Create(ctx, widget("widget-bad", -5), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create a widget of size -5 (schema minimum 0): %v, want Invalid", err)
	}

	// Spec through the main resource, status through the subresource:
	// each ignores the other's half.
	w1, err := widgets.Get(ctx, "widget-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get widget-1: %v", err)
	}
	must(t, unstructured.SetNestedField(w1.Object, int64(7), "spec", "size"))
	must(t, unstructured.SetNestedField(w1.Object, "Ignored", "status", "phase"))
	if w1, err = widgets.Update(ctx, w1, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update widget-1: %v", err)
	}
	must(t, unstructured.SetNestedField(w1.Object, int64(99), "spec", "size"))
	must(t, unstructured.SetNestedField(w1.Object, "Ready", "status", "phase"))
	if _, err = widgets.UpdateStatus(ctx, w1, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update widget-1's status: %v", err)
	}
	if w1, err = widgets.Get(ctx, "widget-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("get widget-1: %v", err)
	}
	size, _, _ := unstructured.NestedInt64(w1.Object, "spec", "size")
	phase, _, _ := unstructured.NestedString(w1.Object, "status", "phase")
	if size != 7 || phase != "Ready" {
		t.Errorf("widget-1: spec.size %d, status.phase %q; want 7 (from the update) and Ready (from the status update)", size, phase)
	}

	w2, err := widgets.Get(ctx, "widget-2", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get widget-2: %v", err)
	}
	w, err := widgets.Watch(ctx, metav1.ListOptions{FieldSelector: byName("widget-2"), ResourceVersion: w2.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch widget-2: %v", err)
	}
	defer w.Stop()
	if _, err := widgets.Patch(ctx, "widget-2", types.MergePatchType, []byte(`{"spec":{"color":"blue"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch widget-2: %v", err)
	}
	ev := nextEvent(t, w, "watch widget-2 after the patch")
	var color string
	if u, ok := ev.Object.(*unstructured.Unstructured); ok {
		color, _, _ = unstructured.NestedString(u.Object, "spec", "color")
	}
	if ev.Type != watch.Modified || color != "blue" {
		t.Fatalf("watch widget-2 after the patch: %s %v, want MODIFIED color=blue", ev.Type, ev.Object)
	}
	for _, name := range []string{"widget-2", "widget-3"} {
		if err := widgets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
		if _, err := widgets.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get %s after delete: %v, want NotFound", name, err)
		}
	}
	if ev := nextEvent(t, w, "watch widget-2 after the delete"); ev.Type != watch.Deleted {
		t.Fatalf("watch widget-2 after the delete: %s %v, want DELETED", ev.Type, ev.Object)
	}

	// widget-1 is left: deleting the definition must delete it first (the
	// apiextensions-apiserver's finalizer), from QuantyKube itself.
	prefix := "/registry/e2e.quantykube.io/widgets/" + ns + "/"
	if n := storeKeys(t, c, prefix); n != 1 {
		t.Fatalf("QuantyKube holds %d keys under %s, want widget-1's", n, prefix)
	}
	if err := crds.Delete(ctx, widgetCRDName, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete CRD: %v", err)
	}
	eventually(t, ctx, 90*time.Second, 500*time.Millisecond, "CRD deleted", func(ctx context.Context) (bool, error) {
		_, err := crds.Get(ctx, widgetCRDName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if n := storeKeys(t, c, prefix); n != 0 {
		t.Errorf("QuantyKube still holds %d keys under %s after the CRD was deleted", n, prefix)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
