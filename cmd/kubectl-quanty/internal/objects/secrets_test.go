package objects

import (
	"reflect"
	"testing"
)

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
	MaskSecrets(a, b)
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
	MaskSecrets(one, nil)
	ann := one["metadata"].(map[string]any)["annotations"].(map[string]any)[lastAppliedAnnotation]
	if want := `{"apiVersion":"v1","data":{"k":"***"},"kind":"Secret","metadata":{"generation":12345678901234567890},"stringData":{"p":"***"}}` + "\n"; ann != want || one["data"].(map[string]any)["k"] != maskDefault {
		t.Errorf("last-applied = %q, want %q", ann, want)
	}
	for _, pair := range [][2]string{{"not json", "not json either"}, {"not json", "not json"}} {
		a, b := obj(nil), obj(nil)
		a["metadata"] = map[string]any{"annotations": map[string]any{lastAppliedAnnotation: pair[0]}}
		b["metadata"] = map[string]any{"annotations": map[string]any{lastAppliedAnnotation: pair[1]}}
		MaskSecrets(a, b)
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
	MaskSecrets(odd, nil)
	if odd["data"] != maskDefault {
		t.Errorf("data as a string masked as %v", odd["data"])
	}
	for _, o := range []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "v"}},
		{"apiVersion": "example.com/v1", "kind": "Secret", "data": map[string]any{"k": "v"}},
		{"apiVersion": "example.com/v2", "kind": "Secret", "data": map[string]any{"k": "v"}},
	} {
		MaskSecrets(o, nil)
		if masked := o["data"].(map[string]any)["k"] == maskDefault; masked != (o["kind"] == "Secret" && o["apiVersion"] != "example.com/v2") {
			t.Errorf("%v %v masked: %v", o["apiVersion"], o["kind"], masked)
		}
	}
}
