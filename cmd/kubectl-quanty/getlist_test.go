package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/quantyroot/quantykube/pkg/timearg"
)

func pod(name, uid, phase string, ready bool, restarts int32, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: meta("shop", name, uid),
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}, NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodPhase(phase), PodIP: "10.0.0.7", ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: ready, RestartCount: restarts}}}}
	p.Labels = labels
	return p
}

// get TYPE --at lists the objects that existed then, in kubectl's
// columns, and says which are gone, changed or replaced since; -l
// matches their labels then; -o yaml is a List.
func TestGetList(t *testing.T) {
	c := newCluster(t)
	c.put("/registry/pods/shop/web-1", encode(t, pod("web-1", "u1", "Running", true, 2, map[string]string{"app": "web"})))
	c.put("/registry/pods/shop/web-2", encode(t, pod("web-2", "u2", "Running", true, 0, map[string]string{"app": "web"})))
	c.put("/registry/pods/shop/db-1", encode(t, pod("db-1", "u3", "Pending", false, 0, map[string]string{"app": "db"})))
	c.put("/registry/pods/shop/same", encode(t, pod("same", "u4", "Running", true, 0, nil)))
	c.put("/registry/pods/other/elsewhere", encode(t, pod("elsewhere", "u5", "Running", true, 0, nil)))
	time.Sleep(5 * time.Millisecond)
	point := timearg.Format(time.Now().UnixMilli(), time.UTC)
	time.Sleep(5 * time.Millisecond)
	c.del("/registry/pods/shop/web-1")
	c.put("/registry/pods/shop/web-2", encode(t, pod("web-2", "u2", "Running", true, 1, map[string]string{"app": "web"})))
	c.put("/registry/pods/shop/db-1", encode(t, pod("db-1", "u6", "Running", true, 0, map[string]string{"app": "db"})))
	c.put("/registry/pods/shop/late", encode(t, pod("late", "u7", "Running", true, 0, nil)))

	out := c.ok("get", "pods", "--at", point)
	for _, re := range []string{
		`(?m)^NAME +READY +STATUS +RESTARTS +AGE +NOW$`,
		`(?m)^web-1 +1/1 +Running +2 +\S+ +deleted$`,
		`(?m)^web-2 +1/1 +Running +0 +\S+ +changed$`,
		`(?m)^db-1 +0/1 +Pending +0 +\S+ +replaced$`,
		`(?m)^same +1/1 +Running +0 +\S+ +same$`,
	} {
		if !hasLine(re, out) {
			t.Errorf("get pods --at: no match for %s in\n%s", re, out)
		}
	}
	if strings.Contains(out, "late") || strings.Contains(out, "elsewhere") {
		t.Errorf("get pods --at lists what did not exist then, or another namespace:\n%s", out)
	}
	if out := c.ok("get", "po", "-A", "--at", point, "-o", "wide", "-l", "app=web"); !hasLine(`(?m)^NAMESPACE +NAME +READY +STATUS +RESTARTS +AGE +IP +NODE +NOW$`, out) ||
		!hasLine(`(?m)^shop +web-1 .* 10\.0\.0\.7 +node-1 +deleted$`, out) || strings.Contains(out, "db-1") || strings.Contains(out, "same") {
		t.Errorf("get po -A -o wide -l app=web:\n%s", out)
	}
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(c.ok("get", "pods", "--at", point, "-o", "json")), &list); err != nil || list.Kind != "List" || len(list.Items) != 4 {
		t.Fatalf("get pods -o json: %v, %s with %d items", err, list.Kind, len(list.Items))
	}
	if got := c.ok("get", "pods", "--at", point, "-o", "name", "-l", "app=db"); got != "pod/db-1\n" {
		t.Errorf("get -o name -l app=db = %q", got)
	}

	// A Deployment's columns, and a custom resource's from its CRD as it
	// was then.
	replicas := int32(3)
	c.put("/registry/deployments/shop/web", encode(t, &appsv1.Deployment{TypeMeta: metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"}, ObjectMeta: meta("shop", "web", "ud"),
		Spec: appsv1.DeploymentSpec{Replicas: &replicas}, Status: appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 3, AvailableReplicas: 2}}))
	if out := c.ok("get", "deploy", "--rev", fmt.Sprint(c.put("/registry/configmaps/shop/x", encode(t, configMap("shop", "x", "ux", nil))))); !hasLine(`(?m)^NAME +READY +UP-TO-DATE +AVAILABLE +AGE +NOW\nweb +2/3 +3 +2 +\S+ +same$`, out) {
		t.Errorf("get deploy --rev:\n%s", out)
	}
	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},"spec":{"group":"example.com","versions":[` +
		`{"name":"v1","additionalPrinterColumns":[{"name":"Color","type":"string","jsonPath":".spec.color"},{"name":"Size","type":"integer","jsonPath":".spec.size","priority":1},{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}]}]}}`
	c.put("/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", []byte(crd))
	rev := c.put("/registry/example.com/widgets/shop/blue", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"blue","namespace":"shop","uid":"uw","creationTimestamp":"2026-05-01T12:00:00Z"},"spec":{"color":"blue","size":3}}`))
	if out := c.ok("get", "widgets", "--rev", fmt.Sprint(rev), "-o", "wide"); !hasLine(`(?m)^NAME +COLOR +SIZE +AGE +NOW\nblue +blue +3 +\S+ +same$`, out) {
		t.Errorf("get widgets -o wide:\n%s", out)
	}
}

// Bad input to get TYPE: kubectl's kind of answer.
func TestGetListErrors(t *testing.T) {
	c := newCluster(t)
	c.put("/registry/pods/shop/web-1", encode(t, pod("web-1", "u1", "Running", true, 0, nil)))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pods"}, "want --rev N or --at TIME"},
		{[]string{"gizmos", "--at", "-1m"}, `the server doesn't have a resource type "gizmos"`},
		{[]string{"pods", "--at", "+1h"}, "--at +1h is in the future"},
		{[]string{"pods", "--at", "-1m", "-l", "a=(b"}, `-l "a=(b"`},
		{[]string{"pods", "--rev", "99999"}, "--rev 99999: outside the history QuantyKube retains"},
		{[]string{"pod/web-1", "--rev", "2", "-o", "wide"}, "-A, -l and -o wide list a type"},
	} {
		code, _, errOut := c.run("", append([]string{"get"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("get %q: exit %d, want %q in\n%s", tc.args, code, tc.want, errOut)
		}
	}
}

// A CustomResourceDefinition stored as Kubernetes protobuf, as
// kube-apiserver stores it: its printer columns are read without its Go
// types.
func TestCRDColumnsFromProtobuf(t *testing.T) {
	str := func(b []byte, n protowire.Number, s string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), []byte(s))
	}
	msg := func(b []byte, n protowire.Number, m []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), m)
	}
	col := str(str(str(nil, 1, "Size"), 2, "integer"), 6, ".spec.size")
	wide := protowire.AppendVarint(protowire.AppendTag(str(str(nil, 1, "Color"), 6, ".spec.color"), 5, protowire.VarintType), 1)
	version := msg(msg(str(nil, 1, "v1"), 6, col), 6, wide)
	crd := msg(nil, 2, msg(str(nil, 1, "example.com"), 7, version))
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}, Raw: crd}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got := crdColumnsByVersion(append([]byte("k8s\x00"), b...))
	want := map[string][]map[string]any{"v1": {{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}, {"name": "Color", "jsonPath": ".spec.color", "priority": int64(1)}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("columns = %v, want %v", got, want)
	}
}

// A CustomResourceDefinition as kube-apiserver v1.37 stores it:
// apiextensions.k8s.io/v1beta1 JSON, the columns on the spec.
func TestCRDColumnsV1beta1(t *testing.T) {
	stored := `{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"CustomResourceDefinition","metadata":{"name":"sprockets.e2e.quantykube.io"},` +
		`"spec":{"additionalPrinterColumns":[{"JSONPath":".spec.size","name":"Size","type":"integer"}],"versions":[{"name":"v1"},` +
		`{"name":"v2","additionalPrinterColumns":[{"JSONPath":".spec.color","name":"Color","type":"string"}]}]}}`
	got := crdColumnsByVersion([]byte(stored))
	if len(got["v1"]) != 1 || got["v1"][0]["jsonPath"] != ".spec.size" || len(got["v2"]) != 1 || got["v2"][0]["name"] != "Color" {
		t.Errorf("columns = %v", got)
	}
}
