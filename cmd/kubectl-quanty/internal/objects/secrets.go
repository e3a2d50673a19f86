package objects

// A Secret's values stay masked in whatever the plugin prints (get, in
// every output format; diff; restore's diff) unless --show-secrets: an
// old value of a Secret is as secret as its value now, and a terminal, a
// CI log or a pasted diff is not where it should go. They are masked as
// kubectl diff masks them (k8s.io/kubectl/pkg/cmd/diff's Masker): each
// value becomes "***", and where a key is on both sides of a diff with
// two values, "*** (before)" and "*** (after)", so that a diff still
// shows which keys changed. Beyond kubectl diff, stringData is masked
// too (kube-apiserver folds it into data, but a value written by hand
// may hold it), and so are the values inside the
// kubectl.kubernetes.io/last-applied-configuration annotation, which
// kubectl apply fills with the whole Secret as applied.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
)

const (
	maskDefault = "***"
	maskBefore  = "*** (before)"
	maskAfter   = "*** (after)"

	lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
)

// secretFields are a Secret's fields whose values are masked.
var secretFields = []string{"data", "stringData"}

// isSecret reports whether obj is a Secret as kubectl diff tells one:
// kind Secret, version v1, whatever the group (a custom resource of that
// name is masked too: better masked than shown).
func isSecret(obj map[string]any) bool {
	av, _ := obj["apiVersion"].(string)
	return obj["kind"] == "Secret" && (av == "v1" || strings.HasSuffix(av, "/v1"))
}

// MaskSecrets masks, in place, the values of a Secret in a and b, the two
// sides of a diff (either may be nil: a diff from or to nothing, or a
// single object to print). Objects that are not Secrets are left alone.
func MaskSecrets(a, b map[string]any) {
	if !isSecret(a) && !isSecret(b) {
		return
	}
	maskFields(a, b)
	maskLastApplied(a, b)
}

// maskFields masks data and stringData of a and b. A field that is not
// a map of values (no API server stores one) is masked whole.
func maskFields(a, b map[string]any) {
	for _, f := range secretFields {
		ma, okA := a[f].(map[string]any)
		mb, okB := b[f].(map[string]any)
		if a[f] != nil && !okA {
			a[f] = maskDefault
		}
		if b[f] != nil && !okB {
			b[f] = maskDefault
		}
		maskValues(ma, mb)
	}
}

// maskValues replaces, in place, every value of a and b (maps of the same
// field on the two sides) as kubectl diff's Masker does.
func maskValues(a, b map[string]any) {
	for k, av := range a {
		if bv, ok := b[k]; ok {
			if !reflect.DeepEqual(av, bv) {
				a[k], b[k] = maskBefore, maskAfter
				continue
			}
			b[k] = maskDefault
		}
		a[k] = maskDefault
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			b[k] = maskDefault
		}
	}
}

// maskLastApplied masks the values in the last-applied-configuration
// annotation of a and b: its data and stringData when it is a JSON
// object on every side that has it, else the whole annotation as one
// value.
func maskLastApplied(a, b map[string]any) {
	ann := func(obj map[string]any) map[string]any {
		meta, _ := obj["metadata"].(map[string]any)
		m, _ := meta["annotations"].(map[string]any)
		return m
	}
	annA, annB := ann(a), ann(b)
	var parsed [2]map[string]any
	var present [2]bool
	whole := false
	for i, m := range []map[string]any{annA, annB} {
		v, ok := m[lastAppliedAnnotation]
		if !ok {
			continue
		}
		present[i] = true
		s, _ := v.(string)
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber() // numbers written back as they were
		if d.Decode(&parsed[i]) != nil || parsed[i] == nil {
			whole = true
		}
	}
	if !present[0] && !present[1] {
		return
	}
	if whole {
		var oa, ob map[string]any
		if present[0] {
			oa = map[string]any{lastAppliedAnnotation: annA[lastAppliedAnnotation]}
		}
		if present[1] {
			ob = map[string]any{lastAppliedAnnotation: annB[lastAppliedAnnotation]}
		}
		maskValues(oa, ob)
		if present[0] {
			annA[lastAppliedAnnotation] = oa[lastAppliedAnnotation]
		}
		if present[1] {
			annB[lastAppliedAnnotation] = ob[lastAppliedAnnotation]
		}
		return
	}
	maskFields(parsed[0], parsed[1])
	for i, m := range []map[string]any{annA, annB} {
		if present[i] {
			m[lastAppliedAnnotation] = compactJSON(parsed[i], m[lastAppliedAnnotation].(string))
		}
	}
}

// compactJSON is obj as JSON, without HTML escapes, ending in a newline
// when the text it replaces did (kubectl apply's does).
func compactJSON(obj map[string]any, was string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(obj) != nil {
		return maskDefault
	}
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if len(was) > 0 && was[len(was)-1] == '\n' {
		out = append(out, '\n')
	}
	return string(out)
}
