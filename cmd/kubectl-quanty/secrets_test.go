package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// secret is Secret db in shop with data, and the annotation kubectl
// apply leaves, holding the values as applied.
func secret(t *testing.T, data map[string]string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"}, ObjectMeta: meta("shop", "db", "uid-db"), Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	applied, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db", "namespace": "shop"}, "stringData": data})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations = map[string]string{lastAppliedAnnotation: string(applied) + "\n"}
	return s
}

// The values of a Secret, in plain text and in base64.
var secretValues = []string{"hunter2", "aHVudGVyMg==", "swordfish", "c3dvcmRmaXNo", "admin", "YWRtaW4=", "s3cr3t-token", "czNjcjN0LXRva2Vu"}

// leaked are the Secret's values in what the plugin printed.
func leaked(printed string) []string {
	var found []string
	for _, v := range secretValues {
		if strings.Contains(printed, v) {
			found = append(found, v)
		}
	}
	return found
}

// A Secret's values are masked in all the plugin prints of them, as
// kubectl diff masks them: get (yaml and json), diff (built in and
// external), restore's diff; undelete never prints them. --show-secrets
// shows them where they are printed.
func TestSecretsMasked(t *testing.T) {
	c := newCluster(t)
	key := "/registry/secrets/shop/db"
	r1 := c.put(key, encode(t, secret(t, map[string]string{"password": "hunter2", "user": "admin"})))
	c.put(key, encode(t, secret(t, map[string]string{"password": "swordfish", "user": "admin", "token": "s3cr3t-token"})))

	for _, format := range []string{"yaml", "json"} {
		out := c.ok("get", "secret/db", "--rev", fmt.Sprint(r1), "-o", format)
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); format == "json" && err != nil {
			t.Fatalf("get -o json: %v\n%s", err, out)
		}
		if l := leaked(out); l != nil || !strings.Contains(out, "***") || !strings.Contains(out, lastAppliedAnnotation) {
			t.Errorf("get -o %s shows %q:\n%s", format, l, out)
		}
		if out := c.ok("get", "secret/db", "--rev", fmt.Sprint(r1), "-o", format, "--show-secrets"); !strings.Contains(out, "aHVudGVyMg==") || !strings.Contains(out, `hunter2`) {
			t.Errorf("get -o %s --show-secrets does not show the values:\n%s", format, out)
		}
	}

	code, out, errOut := c.run("", "diff", "secret/db")
	for _, want := range []string{"-  password: '*** (before)'\n", "+  password: '*** (after)'\n", "+  token: '***'\n", "   user: '***'\n"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("diff: exit %d, no %q in:\n%s%s", code, want, out, errOut)
		}
	}
	if l := leaked(out); l != nil {
		t.Errorf("diff shows %q:\n%s", l, out)
	}
	if _, out, _ := c.run("", "diff", "secret/db", "--show-secrets"); !strings.Contains(out, "-  password: aHVudGVyMg==\n+  password: c3dvcmRmaXNo\n") {
		t.Errorf("diff --show-secrets:\n%s", out)
	}
	var ext strings.Builder
	p := &plugin{in: strings.NewReader(""), out: &ext, errOut: &ext, now: time.Now, loc: time.UTC, externalDiff: "diff -u"}
	if code := p.run(t.Context(), []string{"diff", "secret/db"}); code != 1 || leaked(ext.String()) != nil || !strings.Contains(ext.String(), "*** (after)") {
		t.Errorf("KUBECTL_EXTERNAL_DIFF: exit %d, shows %q:\n%s", code, leaked(ext.String()), ext.String())
	}

	code, out, errOut = c.run("", "restore", "secret/db", "--rev", fmt.Sprint(r1), "--dry-run")
	if code != 0 || leaked(out+errOut) != nil || !strings.Contains(errOut, "+  password: '*** (after)'") {
		t.Errorf("restore --dry-run: exit %d, shows %q:\n%s%s", code, leaked(out+errOut), out, errOut)
	}
	if _, _, errOut := c.run("", "restore", "secret/db", "--rev", fmt.Sprint(r1), "--dry-run", "--show-secrets"); !strings.Contains(errOut, "+  password: aHVudGVyMg==") {
		t.Errorf("restore --dry-run --show-secrets:\n%s", errOut)
	}

	// The namespace goes, with the Secret: undelete names it, and only
	// that.
	c.put("/registry/namespaces/shop", encode(t, namespace(false)))
	c.put("/registry/namespaces/shop", encode(t, namespace(true)))
	c.del(key)
	c.del("/registry/namespaces/shop")
	for _, args := range [][]string{{"--dry-run"}, {"--dry-run", "-o", "yaml"}, {"--yes", "-o", "json"}} {
		code, out, errOut := c.run("", append([]string{"undelete", "namespace", "shop"}, args...)...)
		if code != 0 || leaked(out+errOut) != nil || !strings.Contains(out+errOut, "secret/db") {
			t.Errorf("undelete %s: exit %d, shows %q:\n%s%s", args, code, leaked(out+errOut), out, errOut)
		}
	}
}

func TestMaskSecrets(t *testing.T) {
	obj := func(data map[string]any, more ...any) map[string]any {
		o := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "db"}, "data": data}
		for i := 0; i < len(more); i += 2 {
			o[more[i].(string)] = more[i+1]
		}
		return o
	}
	a := obj(map[string]any{"same": "MQ==", "changed": "MQ==", "removed": "MQ=="}, "stringData", map[string]any{"s": "one"})
	b := obj(map[string]any{"same": "MQ==", "changed": "Mg==", "added": "Mw=="}, "stringData", map[string]any{"s": "two"})
	maskSecrets(a, b)
	wantA := obj(map[string]any{"same": maskDefault, "changed": maskBefore, "removed": maskDefault}, "stringData", map[string]any{"s": maskBefore})
	wantB := obj(map[string]any{"same": maskDefault, "changed": maskAfter, "added": maskDefault}, "stringData", map[string]any{"s": maskAfter})
	if !reflect.DeepEqual(a, wantA) || !reflect.DeepEqual(b, wantB) {
		t.Errorf("masked:\n%v\n%v\nwant:\n%v\n%v", a, b, wantA, wantB)
	}

	// One object alone: every value "***"; the last-applied annotation's
	// values too, as JSON (its numbers as they were), or whole when it is
	// not JSON.
	one := obj(map[string]any{"k": "MQ=="})
	one["metadata"] = map[string]any{"annotations": map[string]any{
		lastAppliedAnnotation: `{"apiVersion":"v1","data":{"k":"MQ=="},"kind":"Secret","metadata":{"generation":12345678901234567890},"stringData":{"p":"<x>"}}` + "\n"}}
	maskSecrets(one, nil)
	ann := one["metadata"].(map[string]any)["annotations"].(map[string]any)[lastAppliedAnnotation]
	if want := `{"apiVersion":"v1","data":{"k":"***"},"kind":"Secret","metadata":{"generation":12345678901234567890},"stringData":{"p":"***"}}` + "\n"; ann != want || one["data"].(map[string]any)["k"] != maskDefault {
		t.Errorf("last-applied = %q, want %q", ann, want)
	}
	for _, pair := range [][2]string{{"not json", "not json either"}, {"not json", "not json"}} {
		a, b := obj(nil), obj(nil)
		a["metadata"] = map[string]any{"annotations": map[string]any{lastAppliedAnnotation: pair[0]}}
		b["metadata"] = map[string]any{"annotations": map[string]any{lastAppliedAnnotation: pair[1]}}
		maskSecrets(a, b)
		got := [2]any{a["metadata"].(map[string]any)["annotations"].(map[string]any)[lastAppliedAnnotation], b["metadata"].(map[string]any)["annotations"].(map[string]any)[lastAppliedAnnotation]}
		want := [2]any{maskBefore, maskAfter}
		if pair[0] == pair[1] {
			want = [2]any{maskDefault, maskDefault}
		}
		if got != want {
			t.Errorf("last-applied %q, %q masked as %q, want %q", pair[0], pair[1], got, want)
		}
	}

	// data that is not a map is masked whole; a Secret is told as kubectl
	// diff tells one, by its kind and version v1 (whatever its group).
	odd := obj(nil, "data", "c2VjcmV0")
	maskSecrets(odd, nil)
	if odd["data"] != maskDefault {
		t.Errorf("data as a string masked as %v", odd["data"])
	}
	for _, o := range []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "v"}},
		{"apiVersion": "example.com/v1", "kind": "Secret", "data": map[string]any{"k": "v"}},
		{"apiVersion": "example.com/v2", "kind": "Secret", "data": map[string]any{"k": "v"}},
	} {
		maskSecrets(o, nil)
		if masked := o["data"].(map[string]any)["k"] == maskDefault; masked != (o["kind"] == "Secret" && o["apiVersion"] != "example.com/v2") {
			t.Errorf("%v %v masked: %v", o["apiVersion"], o["kind"], masked)
		}
	}
}
