package objects

import (
	"encoding/json"
	"testing"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The manager of a change is the one owning the fields it set; where
// none does, the one whose stamp moved; else none.
func TestChangeManager(t *testing.T) {
	const mf = `"managedFields":[
		{"manager":"kubectl-client-side-apply","operation":"Update","time":"2026-05-01T12:00:00Z","fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:replicas":{}}}},
		{"manager":"kube-controller-manager","operation":"Update","subresource":"status","time":"2026-05-01T12:00:05Z","fieldsV1":{"f:status":{"f:replicas":{}}}}]`
	prev := obj(t, `{"metadata":{`+mf+`,"labels":{"app":"web"}},"spec":{"replicas":1},"status":{"replicas":1}}`)
	// The controller again within the same second: no stamp moved.
	cur := obj(t, `{"metadata":{`+mf+`,"labels":{"app":"web"}},"spec":{"replicas":1},"status":{"replicas":2}}`)
	if got := ChangeManager(prev, cur, 1777636805500); got != "kube-controller-manager" {
		t.Errorf("a status write in the same second: manager %q", got)
	}
	cur = obj(t, `{"metadata":{`+mf+`,"labels":{"app":"web","tier":"x"}},"spec":{"replicas":1},"status":{"replicas":1}}`)
	if got := ChangeManager(prev, cur, 1777636805500); got != "" {
		t.Errorf("a change no entry owns and no stamp explains: manager %q", got)
	}
	created := obj(t, `{"metadata":{`+mf+`}}`)
	if got := ChangeManager(nil, created, 1777636805500); got != "kube-controller-manager" {
		t.Errorf("a create: manager %q, want the newest stamp's", got)
	}
	for path, want := range map[string]bool{"spec.replicas": true, "metadata.labels.app": true, "metadata.labels": true,
		`metadata.labels["app"]`: true, "spec.template": false, "status": false} {
		set := ManagedEntries(prev)[0].set
		if got := owns(set, path); got != want {
			t.Errorf("owns(%s) = %v, want %v", path, got, want)
		}
	}
	if toks := pathTokens(`spec.containers[0].env["a.b"].x`); len(toks) != 6 || !toks[2].index || toks[4].name != "a.b" {
		t.Errorf("pathTokens = %+v", toks)
	}
}
