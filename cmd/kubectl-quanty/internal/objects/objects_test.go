package objects_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	objdiff "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/diff"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	cborserializer "k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// encode is obj as kube-apiserver stores a built-in type.
func encode(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := objects.ProtobufCodec.Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func configMap(ns, name, uid string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))},
		Data:       data,
	}
}

func TestDecodeProtobufConfigMap(t *testing.T) {
	b := encode(t, configMap("shop", "web", "uid-1", map[string]string{"color": "blue"}))
	if !bytes.HasPrefix(b, []byte("k8s\x00")) {
		t.Fatalf("not the protobuf envelope: %q", b[:8])
	}
	v := objects.Decode(b)
	if v.Format != "protobuf" || v.U().GetKind() != "ConfigMap" || v.U().GetAPIVersion() != "v1" || v.U().GetName() != "web" || v.U().GetUID() != "uid-1" {
		t.Fatalf("decoded %+v", v)
	}
	if data, _, _ := unstructured.NestedStringMap(v.Object, "data"); data["color"] != "blue" {
		t.Fatalf("data = %v", data)
	}
	y, err := terminal.Render(v.Shown(42, false), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion: v1\ndata:\n  color: blue\nkind: ConfigMap\nmetadata:\n  creationTimestamp: \"2026-05-01T12:00:00Z\"\n  name: web\n  namespace: shop\n  resourceVersion: \"42\"\n  uid: uid-1\n"
	if string(y) != want {
		t.Fatalf("yaml:\n%s\nwant:\n%s", y, want)
	}
}

func TestDecodeJSONCustomResource(t *testing.T) {
	v := objects.Decode([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"blue","namespace":"shop","managedFields":[{"manager":"kubectl"}]},"spec":{"size":3}}`))
	if v.Format != "json" || v.U().GetKind() != "Widget" || v.U().GetAPIVersion() != "example.com/v1" {
		t.Fatalf("decoded %+v", v)
	}
	if n, _, _ := unstructured.NestedInt64(v.Object, "spec", "size"); n != 3 {
		t.Fatalf("spec.size = %d", n)
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(v.Shown(7, false), "metadata", "managedFields"); ok {
		t.Error("managedFields shown without --show-managed-fields")
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(v.Shown(7, true), "metadata", "managedFields"); !ok {
		t.Error("managedFields left out with --show-managed-fields")
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(v.Object, "metadata", "resourceVersion"); ok {
		t.Error("shown changed the decoded object")
	}
}

func TestDecodeCBOR(t *testing.T) {
	var b bytes.Buffer
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "red"}}}
	if err := cborserializer.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	if v := objects.Decode(b.Bytes()); v.Format != "cbor" || v.U().GetName() != "red" || v.U().GetKind() != "Widget" {
		t.Fatalf("decoded %+v", v)
	}
}

func TestDecodeEncryptedSecret(t *testing.T) {
	ciphertext := []byte("k8s:enc:aescbc:v1:key1:\x8f\x00\x13\xfe\x01binary")
	v := objects.Decode(ciphertext)
	if v.Object != nil || v.Format != "encrypted" || v.Encrypted != "aescbc v1, key key1" {
		t.Fatalf("decoded %+v", v)
	}
	d := v.Describe()
	if !strings.Contains(d, "encrypted at rest (aescbc v1, key key1)") || strings.IndexFunc(d, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) }) >= 0 {
		t.Fatalf("describe = %q", d)
	}
	for in, want := range map[string]string{
		"k8s:enc:kms:v2:vault:\x0a\x01":     "kms v2, key vault",
		"k8s:enc:secretbox:v1:k2:xx":        "secretbox v1, key k2",
		"k8s:enc:\x00\x01:v1:k:xx":          "unknown provider",
		"k8s:enc:aesgcm":                    "unknown provider",
		"k8s:enc:aesgcm:v1:k\x1b[31m:xx:yy": "unknown provider",
	} {
		if got := objects.Decode([]byte(in)).Encrypted; got != want {
			t.Errorf("encryption of %q = %q, want %q", in, got, want)
		}
	}
	// A diff shows that the ciphertext changed, and never the ciphertext.
	a, b, _ := objdiff.Texts(objdiff.Snapshot{KV: &mvccpb.KeyValue{Value: ciphertext}}, objdiff.Snapshot{KV: &mvccpb.KeyValue{Value: append(ciphertext, 'x')}}, false)
	if a == b || strings.Contains(a, "binary") || !strings.HasPrefix(a, "# encrypted at rest") {
		t.Fatalf("diff texts %q and %q", a, b)
	}
}

func TestDecodeOthers(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "not a Kubernetes object",
		"plain text":         "not a Kubernetes object",
		`{"a":1}`:            "JSON without a kind",
		`{"kind":`:           "JSON that does not parse",
		"k8s\x00garbage\xff": "Kubernetes protobuf that this kubectl-quanty cannot decode",
	} {
		if v := objects.Decode([]byte(in)); v.Object != nil || !strings.Contains(v.Problem, want) {
			t.Errorf("decode %q = %+v, want %q", in, v, want)
		}
	}
}

func TestChangedFields(t *testing.T) {
	before := map[string]any{
		"metadata": map[string]any{"name": "web", "resourceVersion": "5", "generation": int64(1), "managedFields": []any{"a"},
			"labels": map[string]any{"app.kubernetes.io/name": "web", "tier": "front"}},
		"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "web", "image": "web:1"}, map[string]any{"name": "log", "image": "log:1"}}}},
			"ports": []any{int64(80)}},
		"data":   map[string]any{"color": "blue", "gone": "x"},
		"status": map[string]any{"ready": true},
	}
	after := map[string]any{
		"metadata": map[string]any{"name": "web", "resourceVersion": "9", "generation": int64(2), "managedFields": []any{"b"},
			"labels": map[string]any{"app.kubernetes.io/name": "shop", "tier": "front"}},
		"spec": map[string]any{"replicas": int64(3), "template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "web", "image": "web:2"}, map[string]any{"name": "log", "image": "log:1"}}}},
			"ports": []any{int64(80), int64(443)}},
		"data":   map[string]any{"color": "green", "new": "y"},
		"status": "gone",
	}
	want := []string{`data.color`, `data.gone`, `data.new`, `metadata.labels["app.kubernetes.io/name"]`,
		`spec.ports`, `spec.replicas`, `spec.template.spec.containers[0].image`, `status`}
	if got := objects.ChangedFields(before, after); !slices.Equal(got, want) {
		t.Fatalf("ChangedFields =\n%q\nwant\n%q", got, want)
	}
	if got := objects.ChangedFields(before, before); len(got) != 0 {
		t.Fatalf("no change: %q", got)
	}
	if got := objects.Summarize(want); got != `data.color, data.gone, data.new, metadata.labels["app.kubernetes.io/name"] (+4 more)` {
		t.Fatalf("Summarize = %q", got)
	}
}
