// Package uidecode turns stored values into the JSON of their objects,
// for the web page's JSON answers (a browser cannot decode Kubernetes
// protobuf without its types). It links every built-in API type
// (client-go's scheme), whose packages cost a process memory from its
// start, so it is a package of its own: kubectl quanty ui's proxy decodes
// with it the values the server sends as stored, and neither quantykube
// nor a program embedding pkg/endpoint links it unless it sets
// apiagg.Config.DecodeValue (ADR-047).
package uidecode

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cborserializer "k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

var (
	protobufMagic = []byte("k8s\x00")
	cborMagic     = []byte{0xd9, 0xd9, 0xf7}
	encPrefix     = []byte("k8s:enc:")

	protobufCodec = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	cborCodec     = cborserializer.NewSerializer(scheme.Scheme, scheme.Scheme)
)

// Decode is the object a stored value holds, as JSON, or why there is
// none: encrypted at rest (only kube-apiserver can decrypt it), a type
// this binary does not know, or no Kubernetes object at all.
func Decode(b []byte) (json.RawMessage, string) {
	switch {
	case bytes.HasPrefix(b, encPrefix):
		return nil, "encrypted at rest: only kube-apiserver can decrypt it"
	case bytes.HasPrefix(b, protobufMagic):
		obj, _, err := protobufCodec.Decode(b, nil, nil)
		if err != nil {
			return nil, fmt.Sprintf("Kubernetes protobuf this server cannot decode: %v", err)
		}
		j, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Sprintf("cannot encode as JSON: %v", err)
		}
		return j, ""
	case bytes.HasPrefix(b, cborMagic):
		u := &unstructured.Unstructured{}
		if _, _, err := cborCodec.Decode(b, nil, u); err != nil {
			return nil, fmt.Sprintf("CBOR that is not a Kubernetes object: %v", err)
		}
		j, err := u.MarshalJSON()
		if err != nil {
			return nil, fmt.Sprintf("cannot encode as JSON: %v", err)
		}
		return j, ""
	}
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		var head struct {
			Kind string `json:"kind"`
		}
		if json.Unmarshal(t, &head) == nil && head.Kind != "" {
			return t, ""
		}
	}
	return nil, "not a Kubernetes object"
}
