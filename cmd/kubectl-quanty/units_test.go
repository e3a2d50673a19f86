package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cborserializer "k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/quantyroot/quantykube/pkg/storagekey"
)

func TestDecodeProtobufConfigMap(t *testing.T) {
	b := encode(t, configMap("shop", "web", "uid-1", map[string]string{"color": "blue"}))
	if !bytes.HasPrefix(b, []byte("k8s\x00")) {
		t.Fatalf("not the protobuf envelope: %q", b[:8])
	}
	v := decodeValue(b)
	if v.Format != "protobuf" || v.kind() != "ConfigMap" || v.apiVersion() != "v1" || v.u().GetName() != "web" || v.u().GetUID() != "uid-1" {
		t.Fatalf("decoded %+v", v)
	}
	if data, _, _ := unstructured.NestedStringMap(v.Object, "data"); data["color"] != "blue" {
		t.Fatalf("data = %v", data)
	}
	y, err := render(v.shown(42, false), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := "apiVersion: v1\ndata:\n  color: blue\nkind: ConfigMap\nmetadata:\n  creationTimestamp: \"2026-05-01T12:00:00Z\"\n  name: web\n  namespace: shop\n  resourceVersion: \"42\"\n  uid: uid-1\n"
	if string(y) != want {
		t.Fatalf("yaml:\n%s\nwant:\n%s", y, want)
	}
}

func TestDecodeJSONCustomResource(t *testing.T) {
	v := decodeValue([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"blue","namespace":"shop","managedFields":[{"manager":"kubectl"}]},"spec":{"size":3}}`))
	if v.Format != "json" || v.kind() != "Widget" || v.apiVersion() != "example.com/v1" {
		t.Fatalf("decoded %+v", v)
	}
	if n, _, _ := unstructured.NestedInt64(v.Object, "spec", "size"); n != 3 {
		t.Fatalf("spec.size = %d", n)
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(v.shown(7, false), "metadata", "managedFields"); ok {
		t.Error("managedFields shown without --show-managed-fields")
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(v.shown(7, true), "metadata", "managedFields"); !ok {
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
	if v := decodeValue(b.Bytes()); v.Format != "cbor" || v.u().GetName() != "red" || v.kind() != "Widget" {
		t.Fatalf("decoded %+v", v)
	}
}

func TestDecodeEncryptedSecret(t *testing.T) {
	ciphertext := []byte("k8s:enc:aescbc:v1:key1:\x8f\x00\x13\xfe\x01binary")
	v := decodeValue(ciphertext)
	if v.Object != nil || v.Format != "encrypted" || v.Encrypted != "aescbc v1, key key1" {
		t.Fatalf("decoded %+v", v)
	}
	d := v.describe()
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
		if got := decodeValue([]byte(in)).Encrypted; got != want {
			t.Errorf("encryption of %q = %q, want %q", in, got, want)
		}
	}
	// A diff shows that the ciphertext changed, and never the ciphertext.
	a, b, _ := diffTexts(snapshot{kv: &mvccpb.KeyValue{Value: ciphertext}}, snapshot{kv: &mvccpb.KeyValue{Value: append(ciphertext, 'x')}}, false)
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
		if v := decodeValue([]byte(in)); v.Object != nil || !strings.Contains(v.Problem, want) {
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
	if got := changedFields(before, after); !slices.Equal(got, want) {
		t.Fatalf("changedFields =\n%q\nwant\n%q", got, want)
	}
	if got := changedFields(before, before); len(got) != 0 {
		t.Fatalf("no change: %q", got)
	}
	if got := summarize(want); got != `data.color, data.gone, data.new, metadata.labels["app.kubernetes.io/name"] (+4 more)` {
		t.Fatalf("summarize = %q", got)
	}
}

func TestUnifiedDiff(t *testing.T) {
	a := "apiVersion: v1\ndata:\n  color: green\n  size: L\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\n  uid: u1\n"
	b := "apiVersion: v1\ndata:\n  color: red\n  size: L\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\n  uid: u1\n"
	want := "--- a\n+++ b\n@@ -1,6 +1,6 @@\n apiVersion: v1\n data:\n-  color: green\n+  color: red\n   size: L\n kind: ConfigMap\n metadata:\n"
	if got := unified("a", "b", a, b); got != want {
		t.Fatalf("unified:\n%s\nwant:\n%s", got, want)
	}
	if got := unified("a", "b", a, a); got != "" {
		t.Fatalf("same texts: %q", got)
	}
	if got := unified("a", "b", "", "x: 1\ny: 2\n"); got != "--- a\n+++ b\n@@ -0,0 +1,2 @@\n+x: 1\n+y: 2\n" {
		t.Fatalf("from nothing: %q", got)
	}
	if got := unified("a", "b", "x: 1\n", ""); got != "--- a\n+++ b\n@@ -1 +0,0 @@\n-x: 1\n" {
		t.Fatalf("to nothing: %q", got)
	}
	// Changes far apart are two hunks; near ones one.
	long := func(changed ...int) string {
		var s strings.Builder
		for i := range 30 {
			if slices.Contains(changed, i) {
				s.WriteString("changed\n")
			} else {
				s.WriteString("line " + string(rune('a'+i)) + "\n")
			}
		}
		return s.String()
	}
	if n := strings.Count(unified("a", "b", long(), long(2, 20)), "@@ -"); n != 2 {
		t.Errorf("changes 18 lines apart: %d hunks, want 2", n)
	}
	if n := strings.Count(unified("a", "b", long(), long(2, 8)), "@@ -"); n != 1 {
		t.Errorf("changes 6 lines apart: %d hunks, want 1", n)
	}
	// Painted on a terminal, as git paints a diff; the text of a line is
	// escaped, the colors are not.
	var painted bytes.Buffer
	if err := writeDiff(newScreen(&painted), unified("a", "b", "x\n", "y\x1b[2K\n"), true); err != nil {
		t.Fatal(err)
	}
	if want := "\x1b[1m--- a\x1b[0m\n\x1b[1m+++ b\x1b[0m\n\x1b[36m@@ -1 +1 @@\x1b[0m\n\x1b[31m-x\x1b[0m\n\x1b[32m+y\\x1b[2K\x1b[0m\n"; painted.String() != want {
		t.Errorf("painted:\n%q\nwant\n%q", painted.String(), want)
	}
}

// The edit script of any two texts turns the first into the second, and
// keeps as many lines as the longest common subsequence.
func TestDiffLinesProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lines := func() []string {
		s := make([]string, r.IntN(12))
		for i := range s {
			s[i] = string(rune('a' + r.IntN(4)))
		}
		return s
	}
	for range 2000 {
		a, b := lines(), lines()
		if kept := checkScript(t, a, b, diffLines(a, b)); kept != lcs(a, b) {
			t.Fatalf("diffLines(%q, %q) keeps %d lines, the longest common subsequence has %d", a, b, kept, lcs(a, b))
		}
		// Past the bound on the edit distance, the script is longer but
		// still right.
		checkScript(t, a, b, diffLinesUpTo(a, b, r.IntN(4)))
	}
}

// checkScript fails t unless es turns a into b, every line of a and of b
// in order, and returns how many lines it keeps.
func checkScript(t *testing.T, a, b []string, es []edit) int {
	t.Helper()
	var got []string
	kept, ia, ib := 0, 0, 0
	for _, e := range es {
		switch e.op {
		case ' ':
			if e.a != ia || e.b != ib || a[e.a] != b[e.b] {
				t.Fatalf("diff of %d and %d lines: kept line %d (%q) as line %d (%q), at lines %d and %d", len(a), len(b), e.a, a[e.a], e.b, b[e.b], ia, ib)
			}
			got, kept, ia, ib = append(got, a[e.a]), kept+1, ia+1, ib+1
		case '-':
			if e.a != ia || e.b != ib {
				t.Fatalf("diff of %d and %d lines: removed line %d at %d, %d, want %d, %d", len(a), len(b), e.a, e.a, e.b, ia, ib)
			}
			ia++
		case '+':
			if e.a != ia || e.b != ib {
				t.Fatalf("diff of %d and %d lines: added line %d at %d, %d, want %d, %d", len(a), len(b), e.b, e.a, e.b, ia, ib)
			}
			got, ib = append(got, b[e.b]), ib+1
		}
	}
	if ia != len(a) || !slices.Equal(got, b) && !(len(got) == 0 && len(b) == 0) {
		t.Fatalf("the diff of %d and %d lines goes through %d lines of the first and makes %d lines, not the second", len(a), len(b), ia, len(got))
	}
	return kept
}

// The memory of a diff grows with the square of the edit distance, which
// maxDiffEdits bounds, not with the distance times the length: an object
// of thousands of changed lines can still be diffed, so restored.
func TestDiffLinesMemory(t *testing.T) {
	numbered := func(prefix string, n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("%s %d", prefix, i)
		}
		return s
	}
	scattered := numbered("line", 20000)
	for i := 20; i < len(scattered); i += 40 {
		scattered[i] = "changed"
	}
	const bound = 16 << 20
	for _, c := range []struct {
		name string
		a, b []string
		kept int // the longest common subsequence
	}{
		{"4000 lines, all changed", numbered("a", 4000), numbered("b", 4000), 0},
		{"20000 lines, 500 changed", numbered("line", 20000), scattered, 19500},
		{"a line added to 20000", numbered("line", 20000), append(numbered("line", 20000), "new"), 20000},
	} {
		var es []edit
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		es = diffLines(c.a, c.b)
		runtime.ReadMemStats(&after)
		if kept := checkScript(t, c.a, c.b, es); kept != c.kept {
			t.Errorf("%s: the diff keeps %d lines, want %d", c.name, kept, c.kept)
		}
		n := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d KiB allocated", c.name, n>>10)
		if n > bound {
			t.Errorf("%s: the diff allocated %d MiB, want at most %d", c.name, n>>20, bound>>20)
		}
	}
}

func lcs(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

func cand(t *testing.T, group, resource, name string, obj *unstructured.Unstructured) candidate {
	t.Helper()
	obj.SetName(name)
	b, err := obj.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r := storagekey.Resource{Group: group, Resource: resource, Namespaced: true}
	return candidate{res: apiResource{Resource: r, Kind: obj.GetKind()}, obj: storagekey.Object{Resource: r, Namespace: "shop", Name: name},
		kv: &mvccpb.KeyValue{Value: b}}
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
	deleting.SetDeletionTimestamp(&metav1.Time{Time: created.Time})
	deleting.SetFinalizers([]string{"example.com/keep"})
	cands := []candidate{
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
	cands = append(cands, candidate{res: apiResource{Resource: storagekey.Resource{Resource: "secrets", Namespaced: true}},
		obj: storagekey.Object{Name: "sealed"}, kv: &mvccpb.KeyValue{Value: []byte("k8s:enc:aescbc:v1:k:x")}})
	restore, skips := order(cands)
	var got []string
	for _, c := range restore {
		got = append(got, c.res.String()+"/"+c.obj.Name)
	}
	want := []string{"resourcequotas/q", "roles.rbac.authorization.k8s.io/app", "rolebindings.rbac.authorization.k8s.io/app",
		"serviceaccounts/app", "configmaps/owned-by-widget", "secrets/db", "secrets/sealed", "endpoints/manual", "services/web",
		"widgets.example.com/w", "deployments.apps/web", "jobs.batch/once", "pods/debug", "horizontalpodautoscalers.autoscaling/web"}
	if !slices.Equal(got, want) {
		t.Fatalf("order:\n%q\nwant\n%q", got, want)
	}
	why := map[string]string{}
	for _, s := range skips {
		why[s.res.String()+"/"+s.obj.Name] = s.reason
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
