package get

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/pkg/timearg"
)

func newCluster(t *testing.T) *cmdtesting.Cluster { return cmdtesting.New(t, NewCmdGet) }

// get TYPE --at lists the objects that existed then, in kubectl's
// columns, and says which are gone, changed or replaced since; -l
// matches their labels then; -o yaml is a List.
func TestGetList(t *testing.T) {
	c := newCluster(t)
	c.Put("/registry/pods/shop/web-1", cmdtesting.Encode(t, cmdtesting.Pod("web-1", "u1", "Running", true, 2, map[string]string{"app": "web"})))
	c.Put("/registry/pods/shop/web-2", cmdtesting.Encode(t, cmdtesting.Pod("web-2", "u2", "Running", true, 0, map[string]string{"app": "web"})))
	c.Put("/registry/pods/shop/db-1", cmdtesting.Encode(t, cmdtesting.Pod("db-1", "u3", "Pending", false, 0, map[string]string{"app": "db"})))
	c.Put("/registry/pods/shop/same", cmdtesting.Encode(t, cmdtesting.Pod("same", "u4", "Running", true, 0, nil)))
	c.Put("/registry/pods/other/elsewhere", cmdtesting.Encode(t, cmdtesting.Pod("elsewhere", "u5", "Running", true, 0, nil)))
	time.Sleep(5 * time.Millisecond)
	point := timearg.Format(time.Now().UnixMilli(), time.UTC)
	time.Sleep(5 * time.Millisecond)
	c.Del("/registry/pods/shop/web-1")
	c.Put("/registry/pods/shop/web-2", cmdtesting.Encode(t, cmdtesting.Pod("web-2", "u2", "Running", true, 1, map[string]string{"app": "web"})))
	c.Put("/registry/pods/shop/db-1", cmdtesting.Encode(t, cmdtesting.Pod("db-1", "u6", "Running", true, 0, map[string]string{"app": "db"})))
	c.Put("/registry/pods/shop/late", cmdtesting.Encode(t, cmdtesting.Pod("late", "u7", "Running", true, 0, nil)))

	out := c.OK("get", "pods", "--at", point)
	for _, re := range []string{
		`(?m)^NAME +READY +STATUS +RESTARTS +AGE +NOW$`,
		`(?m)^web-1 +1/1 +Running +2 +\S+ +deleted$`,
		`(?m)^web-2 +1/1 +Running +0 +\S+ +changed$`,
		`(?m)^db-1 +0/1 +Pending +0 +\S+ +replaced$`,
		`(?m)^same +1/1 +Running +0 +\S+ +same$`,
	} {
		if !cmdtesting.HasLine(re, out) {
			t.Errorf("get pods --at: no match for %s in\n%s", re, out)
		}
	}
	if strings.Contains(out, "late") || strings.Contains(out, "elsewhere") {
		t.Errorf("get pods --at lists what did not exist then, or another namespace:\n%s", out)
	}
	if out := c.OK("get", "po", "-A", "--at", point, "-o", "wide", "-l", "app=web"); !cmdtesting.HasLine(`(?m)^NAMESPACE +NAME +READY +STATUS +RESTARTS +AGE +IP +NODE +NOW$`, out) ||
		!cmdtesting.HasLine(`(?m)^shop +web-1 .* 10\.0\.0\.7 +node-1 +deleted$`, out) || strings.Contains(out, "db-1") || strings.Contains(out, "same") {
		t.Errorf("get po -A -o wide -l app=web:\n%s", out)
	}
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(c.OK("get", "pods", "--at", point, "-o", "json")), &list); err != nil || list.Kind != "List" || len(list.Items) != 4 {
		t.Fatalf("get pods -o json: %v, %s with %d items", err, list.Kind, len(list.Items))
	}
	if got := c.OK("get", "pods", "--at", point, "-o", "name", "-l", "app=db"); got != "pod/db-1\n" {
		t.Errorf("get -o name -l app=db = %q", got)
	}

	// A Deployment's columns, and a custom resource's from its CRD as it
	// was then.
	replicas := int32(3)
	c.Put("/registry/deployments/shop/web", cmdtesting.Encode(t, &appsv1.Deployment{TypeMeta: metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"}, ObjectMeta: cmdtesting.Meta("shop", "web", "ud"),
		Spec: appsv1.DeploymentSpec{Replicas: &replicas}, Status: appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 3, AvailableReplicas: 2}}))
	if out := c.OK("get", "deploy", "--rev", fmt.Sprint(c.Put("/registry/configmaps/shop/x", cmdtesting.Encode(t, cmdtesting.ConfigMap("shop", "x", "ux", nil))))); !cmdtesting.HasLine(`(?m)^NAME +READY +UP-TO-DATE +AVAILABLE +AGE +NOW\nweb +2/3 +3 +2 +\S+ +same$`, out) {
		t.Errorf("get deploy --rev:\n%s", out)
	}
	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},"spec":{"group":"example.com","versions":[` +
		`{"name":"v1","additionalPrinterColumns":[{"name":"Color","type":"string","jsonPath":".spec.color"},{"name":"Size","type":"integer","jsonPath":".spec.size","priority":1},{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}]}]}}`
	c.Put("/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", []byte(crd))
	rev := c.Put("/registry/example.com/widgets/shop/blue", []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"blue","namespace":"shop","uid":"uw","creationTimestamp":"2026-05-01T12:00:00Z"},"spec":{"color":"blue","size":3}}`))
	if out := c.OK("get", "widgets", "--rev", fmt.Sprint(rev), "-o", "wide"); !cmdtesting.HasLine(`(?m)^NAME +COLOR +SIZE +AGE +NOW\nblue +blue +3 +\S+ +same$`, out) {
		t.Errorf("get widgets -o wide:\n%s", out)
	}
}

// Bad input to get TYPE: kubectl's kind of answer.
func TestGetListErrors(t *testing.T) {
	c := newCluster(t)
	c.Put("/registry/pods/shop/web-1", cmdtesting.Encode(t, cmdtesting.Pod("web-1", "u1", "Running", true, 0, nil)))
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
		code, _, errOut := c.Run("", append([]string{"get"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("get %q: exit %d, want %q in\n%s", tc.args, code, tc.want, errOut)
		}
	}
}
