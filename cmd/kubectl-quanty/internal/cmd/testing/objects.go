package testing

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// Created is the creationTimestamp of the test objects.
var Created = metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))

// Encode is obj as kube-apiserver stores a built-in type: Kubernetes
// protobuf.
func Encode(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := objects.ProtobufCodec.Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Meta is an object's metadata, created at Created.
func Meta(ns, name, uid string, owners ...metav1.OwnerReference) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), CreationTimestamp: Created, OwnerReferences: owners}
}

// ControlledBy is an owner reference to the object's controller.
func ControlledBy(kind, apiVersion, name, uid string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}
}

// ConfigMap is a ConfigMap with data.
func ConfigMap(ns, name, uid string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), CreationTimestamp: Created},
		Data:       data,
	}
}

// Namespace is the namespace shop, being deleted or not.
func Namespace(deleting bool, finalizers ...corev1.FinalizerName) *corev1.Namespace {
	n := &corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: Meta("", "shop", "uid-ns"),
		Spec: corev1.NamespaceSpec{Finalizers: finalizers}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	if deleting {
		n.DeletionTimestamp = ptr.To(metav1.NewTime(Created.Add(3600e9)))
		n.Status.Phase = corev1.NamespaceTerminating
	}
	return n
}

// Pod is a Pod in shop with one container.
func Pod(name, uid, phase string, ready bool, restarts int32, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: Meta("shop", name, uid),
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}, NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodPhase(phase), PodIP: "10.0.0.7", ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: ready, RestartCount: restarts}}}}
	p.Labels = labels
	return p
}

// Managed is a managedFields entry of manager, stamped at t (seconds, as
// kube-apiserver stores them), owning the fields named.
func Managed(manager string, op metav1.ManagedFieldsOperationType, t time.Time, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: op, APIVersion: "v1", Time: &metav1.Time{Time: t.Truncate(time.Second)},
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields),
	}
}

// Edits writes the ConfigMap web in shop and edits it twice, a few
// milliseconds apart so that each revision has its own commit time.
func (c *Cluster) Edits() (key string, revs [3]int64, values [3][]byte) {
	key = "/registry/configmaps/shop/web"
	for i, color := range []string{"blue", "green", "red"} {
		values[i] = Encode(c.T, ConfigMap("shop", "web", "uid-web", map[string]string{"color": color, "size": "L"}))
		revs[i] = c.Put(key, values[i])
		time.Sleep(5 * time.Millisecond)
	}
	return key, revs, values
}

// Log is key's whole retained log, read from the store.
func (c *Cluster) Log(key string) []*historypb.LogEntry {
	c.T.Helper()
	resp, err := history.New(c.Store).Log(context.Background(), &historypb.Request{Key: []byte(key)})
	if err != nil {
		c.T.Fatal(err)
	}
	return resp.Entries
}

// HasLine reports whether a line of s matches re.
func HasLine(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// Secret is Secret db in shop with data, and the annotation kubectl apply
// leaves, holding the values as applied.
func Secret(t *testing.T, data map[string]string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"}, ObjectMeta: Meta("shop", "db", "uid-db"), Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	applied, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db", "namespace": "shop"}, "stringData": data})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(applied) + "\n"}
	return s
}

// SecretValues are the values of the test Secrets, in plain text and in
// base64.
var SecretValues = []string{"hunter2", "aHVudGVyMg==", "swordfish", "c3dvcmRmaXNo", "admin", "YWRtaW4=", "s3cr3t-token", "czNjcjN0LXRva2Vu"}

// Leaked are the Secrets' values in what a command printed.
func Leaked(printed string) []string {
	var found []string
	for _, v := range SecretValues {
		if strings.Contains(printed, v) {
			found = append(found, v)
		}
	}
	return found
}
