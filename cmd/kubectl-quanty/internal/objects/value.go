// Package objects is what the plugin knows of Kubernetes objects as
// kube-apiserver stores them: decoding a stored value, the fields a change
// touched and the manager that made it, a Secret's values masked, a
// CustomResourceDefinition's printer columns, the state of a deletion,
// what a controller makes again, and a key's log told as changes.
//
// Values are stored as Kubernetes protobuf for built-in types (the
// "k8s\x00" envelope), JSON for custom resources, CBOR where the CBOR
// storage feature is on, and any of them encrypted at rest ("k8s:enc:"
// and the provider), which only kube-apiserver can decrypt.
package objects

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	cborserializer "k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/kubernetes/scheme"
)

var (
	protobufMagic = []byte("k8s\x00")
	cborMagic     = []byte{0xd9, 0xd9, 0xf7} // self-described CBOR, as kube-apiserver writes it
	encPrefix     = []byte("k8s:enc:")

	// ProtobufCodec is kube-apiserver's codec of built-in types.
	ProtobufCodec = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	cborCodec     = cborserializer.NewSerializer(scheme.Scheme, scheme.Scheme)
)

// Value is a stored value, decoded as far as it can be.
type Value struct {
	// Object is the Kubernetes object as its JSON reads (nil when the
	// value holds none that can be shown).
	Object map[string]any
	// Format is how it was stored: protobuf, json, cbor, encrypted or
	// bytes (none of those).
	Format string
	// Encrypted names the provider and key of a value encrypted at rest.
	Encrypted string
	// Problem says why a value that is not encrypted shows no object.
	Problem string
	Size    int
}

// Decode decodes a stored value.
func Decode(b []byte) Value {
	v := Value{Size: len(b)}
	switch {
	case bytes.HasPrefix(b, encPrefix):
		v.Format, v.Encrypted = "encrypted", encryption(b)
	case bytes.HasPrefix(b, protobufMagic):
		v.Format = "protobuf"
		obj, _, err := ProtobufCodec.Decode(b, nil, nil)
		if err != nil {
			v.Problem = fmt.Sprintf("Kubernetes protobuf that this kubectl-quanty cannot decode: %v", err)
			return v
		}
		v.Object, v.Problem = toMap(obj)
	case bytes.HasPrefix(b, cborMagic):
		v.Format = "cbor"
		u := &unstructured.Unstructured{}
		if _, _, err := cborCodec.Decode(b, nil, u); err != nil {
			v.Problem = fmt.Sprintf("CBOR that is not a Kubernetes object: %v", err)
			return v
		}
		v.Object = u.Object
	case len(bytes.TrimSpace(b)) > 0 && bytes.TrimSpace(b)[0] == '{':
		v.Format = "json"
		var m map[string]any
		if err := utiljson.Unmarshal(b, &m); err != nil {
			v.Problem = fmt.Sprintf("JSON that does not parse: %v", err)
			return v
		}
		if _, ok := m["kind"].(string); !ok {
			v.Problem = "JSON without a kind: not a Kubernetes object"
			return v
		}
		v.Object = m
	default:
		v.Format, v.Problem = "bytes", "not a Kubernetes object"
	}
	return v
}

// toMap is obj as its JSON reads.
func toMap(obj runtime.Object) (map[string]any, string) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Sprintf("cannot encode as JSON: %v", err)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil {
		return nil, fmt.Sprintf("cannot decode its JSON: %v", err)
	}
	return m, ""
}

// encryption names the provider, its version and key of an encrypted
// value: k8s:enc:aescbc:v1:KEY:..., k8s:enc:kms:v2:PROVIDER:..., without
// ever printing the ciphertext.
func encryption(b []byte) string {
	parts := strings.SplitN(string(b[len(encPrefix):]), ":", 4)
	if len(parts) < 4 {
		return "unknown provider"
	}
	for _, p := range parts[:3] {
		if p == "" || strings.IndexFunc(p, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) }) >= 0 {
			return "unknown provider"
		}
	}
	return fmt.Sprintf("%s %s, key %s", parts[0], parts[1], parts[2])
}

// Describe is one line about a value that shows no object.
func (v Value) Describe() string {
	switch {
	case v.Object != nil:
		return fmt.Sprintf("%s %s (%s)", v.U().GetAPIVersion(), v.U().GetKind(), v.Format)
	case v.Encrypted != "":
		return fmt.Sprintf("encrypted at rest (%s), %d bytes: only kube-apiserver can decrypt it", v.Encrypted, v.Size)
	default:
		return fmt.Sprintf("%s, %d bytes", v.Problem, v.Size)
	}
}

// U is the object, for its accessors (empty when there is none).
func (v Value) U() *unstructured.Unstructured { return &unstructured.Unstructured{Object: v.Object} }

// Shown is the object as kubectl get would print it at revision rev:
// metadata.resourceVersion is the revision (kube-apiserver fills it in
// from the store, which does not keep it), and managedFields are left out
// unless asked for. rev 0 leaves resourceVersion out, for diffs.
func (v Value) Shown(rev int64, managedFields bool) map[string]any {
	if v.Object == nil {
		return nil
	}
	u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(v.Object)}
	if rev > 0 {
		u.SetResourceVersion(fmt.Sprint(rev))
	} else {
		unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
	}
	if !managedFields {
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	}
	return u.Object
}
