package util_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

func cand(t *testing.T, group, resource, name string, obj *unstructured.Unstructured) util.Candidate {
	t.Helper()
	obj.SetName(name)
	b, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r := storagekey.Resource{Group: group, Resource: resource, Namespaced: true}
	return util.Candidate{Resource: discovery.Resource{Resource: r, Kind: obj.GetKind()}, Object: storagekey.Object{Resource: r, Namespace: "shop", Name: name},
		KV: &mvccpb.KeyValue{Value: b}}
}

func object(kind string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind}}
	for k, v := range fields {
		u.Object[k] = v
	}
	return u
}

func TestUndeleteOrderAndSkips(t *testing.T) {
	owned := object("Pod", nil)
	owned.SetOwnerReferences([]metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", Controller: ptr.To(true)}})
	notController := object("ConfigMap", nil)
	notController.SetOwnerReferences([]metav1.OwnerReference{{Kind: "Widget", Name: "w"}})
	deleting := object("ConfigMap", nil)
	deleting.SetDeletionTimestamp(&metav1.Time{Time: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)})
	deleting.SetFinalizers([]string{"example.com/keep"})
	cands := []util.Candidate{
		cand(t, "apps", "deployments", "web", object("Deployment", nil)),
		cand(t, "", "pods", "web-1-x", owned),
		cand(t, "", "pods", "debug", object("Pod", nil)),
		cand(t, "autoscaling", "horizontalpodautoscalers", "web", object("HorizontalPodAutoscaler", nil)),
		cand(t, "example.com", "widgets", "w", object("Widget", nil)),
		cand(t, "", "configmaps", "owned-by-widget", notController),
		cand(t, "", "configmaps", "kube-root-ca.crt", object("ConfigMap", nil)),
		cand(t, "", "configmaps", "going", deleting),
		cand(t, "", "secrets", "tok", object("Secret", map[string]any{"type": string(corev1.SecretTypeServiceAccountToken)})),
		cand(t, "", "secrets", "db", object("Secret", map[string]any{"type": "Opaque"})),
		cand(t, "", "endpoints", "web", object("Endpoints", nil)),
		cand(t, "", "endpoints", "manual", object("Endpoints", nil)),
		cand(t, "", "services", "web", object("Service", nil)),
		cand(t, "", "serviceaccounts", "default", object("ServiceAccount", nil)),
		cand(t, "", "serviceaccounts", "app", object("ServiceAccount", nil)),
		cand(t, "rbac.authorization.k8s.io", "rolebindings", "app", object("RoleBinding", nil)),
		cand(t, "rbac.authorization.k8s.io", "roles", "app", object("Role", nil)),
		cand(t, "", "resourcequotas", "q", object("ResourceQuota", nil)),
		cand(t, "batch", "jobs", "once", object("Job", nil)),
	}
	cands = append(cands, util.Candidate{Resource: discovery.Resource{Resource: storagekey.Resource{Resource: "secrets", Namespaced: true}},
		Object: storagekey.Object{Name: "sealed"}, KV: &mvccpb.KeyValue{Value: []byte("k8s:enc:aescbc:v1:k:x")}})
	restore, skips := util.Order(cands)
	var got []string
	for _, c := range restore {
		got = append(got, c.Resource.String()+"/"+c.Object.Name)
	}
	want := []string{"resourcequotas/q", "roles.rbac.authorization.k8s.io/app", "rolebindings.rbac.authorization.k8s.io/app",
		"serviceaccounts/app", "configmaps/owned-by-widget", "secrets/db", "secrets/sealed", "endpoints/manual", "services/web",
		"widgets.example.com/w", "deployments.apps/web", "jobs.batch/once", "pods/debug", "horizontalpodautoscalers.autoscaling/web"}
	if !slices.Equal(got, want) {
		t.Fatalf("order:\n%q\nwant\n%q", got, want)
	}
	why := map[string]string{}
	for _, s := range skips {
		why[s.Resource.String()+"/"+s.Object.Name] = s.Reason
	}
	for obj, reason := range map[string]string{
		"pods/web-1-x":                "its controller recreates it (owner ReplicaSet/web-1)",
		"configmaps/kube-root-ca.crt": "kube-controller-manager publishes it in every namespace",
		"configmaps/going":            "it was already being deleted (deletionTimestamp 2026-05-01T12:00:00Z, finalizers example.com/keep)",
		"secrets/tok":                 "a ServiceAccount token: kube-controller-manager's token controller manages it",
		"endpoints/web":               "the endpoints controller recreates it for its Service",
		"serviceaccounts/default":     "kube-controller-manager creates it in every namespace",
	} {
		if why[obj] != reason {
			t.Errorf("%s skipped for %q, want %q", obj, why[obj], reason)
		}
	}
	if len(skips) != 6 {
		t.Errorf("skipped %d, want 6: %v", len(skips), why)
	}
}
