package blame

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/restore"
	cmdtesting "github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// A Deployment written by kubectl, then scaled by a program with its own
// field manager, then its image changed by kubectl again: blame gives
// each field the revision and manager that last set it, and its lines
// are the object's YAML.
func TestBlame(t *testing.T) {
	c := cmdtesting.New(t, NewCmdBlame, restore.NewCmdRestore)
	key := "/registry/deployments/shop/web"
	t0 := time.Now().Add(-time.Hour)
	replicas := int32(1)
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-d", CreationTimestamp: cmdtesting.Created, Generation: 1, Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "web", Image: "nginx:1", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
		}}}},
	}
	d.ManagedFields = []metav1.ManagedFieldsEntry{cmdtesting.Managed("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, t0, `{"f:spec":{}}`)}
	r1 := c.Put(key, cmdtesting.Encode(t, d))

	replicas = 3
	d.Generation = 2
	d.ManagedFields = append(d.ManagedFields, cmdtesting.Managed("scaler", metav1.ManagedFieldsOperationUpdate, t0.Add(time.Minute), `{"f:spec":{"f:replicas":{}}}`))
	r2 := c.Put(key, cmdtesting.Encode(t, d))

	// A new env var before A: A's blame stays with the create.
	d.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	d.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "B", Value: "2"}, {Name: "A", Value: "1"}}
	d.Generation = 3
	d.ManagedFields[0].Time = &metav1.Time{Time: t0.Add(2 * time.Minute).Truncate(time.Second)}
	r3 := c.Put(key, cmdtesting.Encode(t, d))

	out := c.OK("blame", "deploy/web")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "REVISION  AGE  MANAGER") {
		t.Fatalf("blame header: %q", lines[0])
	}
	want := map[string]string{ // a line's YAML -> its revision and manager
		"replicas: 3":           fmt.Sprint(r2, " scaler"),
		"image: nginx:2":        fmt.Sprint(r3, " kubectl-client-side-apply"),
		"- name: B":             fmt.Sprint(r3, " kubectl-client-side-apply"),
		"value: \"1\"":          fmt.Sprint(r1, " kubectl-client-side-apply"),
		"app: web":              fmt.Sprint(r1, " kubectl-client-side-apply"),
		"generation: 3":         fmt.Sprint(r3, " kubectl-client-side-apply"),
		"kind: Deployment":      fmt.Sprint(r1, " kubectl-client-side-apply"),
		"uid: uid-d":            fmt.Sprint(r1, " kubectl-client-side-apply"),
		"template:":             "",
		"- image: nginx:2":      "",
		"managedFields:":        "absent",
		"resourceVersion: \"\"": "absent",
	}
	var yamlText strings.Builder
	col := strings.Index(lines[0], "deployment.apps/web at revision")
	for _, l := range lines[1:] {
		text := l[col:]
		yamlText.WriteString(text + "\n")
		f := strings.Fields(l[:col])
		got := ""
		if len(f) > 0 {
			got = f[0] + " " + f[len(f)-1]
		}
		if w, ok := want[strings.TrimSpace(text)]; ok {
			if w == "absent" || got != w {
				t.Errorf("blame line %q: got %q, want %q", l, got, w)
			}
			delete(want, strings.TrimSpace(text))
		}
	}
	for k, w := range want {
		if w != "absent" && k != "- image: nginx:2" {
			t.Errorf("blame printed no line %q:\n%s", k, out)
		}
	}
	// The YAML beside the blame is the object's.
	var back appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(yamlText.String()), &back); err != nil {
		t.Fatalf("blame's YAML does not parse: %v\n%s", err, yamlText.String())
	}
	if *back.Spec.Replicas != 3 || back.Spec.Template.Spec.Containers[0].Env[1].Name != "A" || back.UID != "uid-d" {
		t.Errorf("blame's YAML is not the object: %+v", back)
	}

	// At the second revision, and as JSON.
	var rep blameReport
	if err := json.Unmarshal([]byte(c.OK("blame", "deployments.apps/web", "--rev", fmt.Sprint(r2), "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range rep.Fields {
		got[f.Path] = fmt.Sprint(f.Revision, " ", f.Manager)
	}
	if rep.Revision != r2 || got["spec.replicas"] != fmt.Sprint(r2, " scaler") ||
		got["spec.template.spec.containers[name=web].image"] != fmt.Sprint(r1, " kubectl-client-side-apply") {
		t.Errorf("blame --rev %d -o json: revision %d, fields %v", r2, rep.Revision, got)
	}
}

// A value older than the retention window's oldest change is blamed on
// that change's previous state, as "at or before" it; a restored value
// on the restore; a Secret's values stay masked.
func TestBlameOldestAndRestoreAndSecret(t *testing.T) {
	c := cmdtesting.New(t, NewCmdBlame, restore.NewCmdRestore)
	key, revs, _ := c.Edits()
	c.OK("restore", "cm/web", "--rev", fmt.Sprint(revs[0]), "--yes")
	out := c.OK("blame", "cm/web")
	if !cmdtesting.HasLine(`(?m)^\d+ +\S+ +\(restore\) +  color: blue$`, out) || !cmdtesting.HasLine(fmt.Sprintf(`(?m)^%d +\S+ +  size: L$`, revs[0]), out) {
		t.Errorf("blame after a restore:\n%s", out)
	}
	entries := c.Log(key)
	blame := blameOf(entries[1:], revs[2])
	if o := blame["data.size"]; !o.Oldest || o.Revision != revs[0] {
		t.Errorf("without the create, data.size is blamed on %+v, want at or before %d", o, revs[0])
	}
	if o := blame["data.color"]; o.Oldest || o.Revision != revs[2] {
		t.Errorf("data.color is blamed on %+v, want %d", o, revs[2])
	}

	c.Put("/registry/secrets/shop/db", cmdtesting.Encode(t, cmdtesting.Secret(t, map[string]string{"password": "hunter2"})))
	if out := c.OK("blame", "secret/db"); len(cmdtesting.Leaked(out)) > 0 || !strings.Contains(out, "password: '***'") {
		t.Errorf("blame of a Secret:\n%s", out)
	}
}
