package uidecode_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/quantyroot/quantykube/pkg/apiagg/uidecode"
)

func stored(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecode(t *testing.T) {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Data: map[string]string{"color": "<b>red</b>"}}
	j, problem := uidecode.Decode(stored(t, cm))
	var got corev1.ConfigMap
	if err := json.Unmarshal(j, &got); problem != "" || err != nil || got.Kind != "ConfigMap" || got.Name != "web" || got.Data["color"] != "<b>red</b>" {
		t.Errorf("a ConfigMap in protobuf: %s %q %v", j, problem, err)
	}
	cr := `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":3}}`
	if j, problem := uidecode.Decode([]byte(cr + "\n")); problem != "" || string(j) != cr {
		t.Errorf("a custom resource in JSON: %s %q", j, problem)
	}
	for in, want := range map[string]string{
		"k8s:enc:aescbc:v1:key1:secret": "encrypted at rest",
		"namespace a":                   "not a Kubernetes object",
		`{"no":"kind"}`:                 "not a Kubernetes object",
		`{"kind":`:                      "not a Kubernetes object",
		"k8s\x00garbage":                "Kubernetes protobuf this server cannot decode",
		"\xd9\xd9\xf7garbage":           "CBOR that is not a Kubernetes object",
	} {
		if j, problem := uidecode.Decode([]byte(in)); j != nil || !strings.HasPrefix(problem, want) {
			t.Errorf("%q: %s %q, want %q", in, j, problem, want)
		}
	}
}

// BenchmarkDecodePage is the decoding of a page of the timeline: 500
// Pods of a few KB, each as kube-apiserver stores it.
func BenchmarkDecodePage(b *testing.B) {
	var values [][]byte
	for i := range 500 {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "shop", Labels: map[string]string{"app": "web", "pod-template-hash": "6c58b9c486"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: "Update", APIVersion: "v1", FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:phase":{}}}`)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1.2.3",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				Env:       []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 1000)}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
		values = append(values, stored(b, p))
	}
	b.ResetTimer()
	for b.Loop() {
		for _, v := range values {
			if _, problem := uidecode.Decode(v); problem != "" {
				b.Fatal(problem)
			}
		}
	}
}
