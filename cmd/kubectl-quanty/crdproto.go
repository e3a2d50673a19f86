package main

// A CustomResourceDefinition as kube-apiserver stores it: Kubernetes
// protobuf, whose Go types (k8s.io/apiextensions-apiserver) this plugin
// does not link, for one small read: the additionalPrinterColumns of each
// version. The field numbers are apiextensions.k8s.io/v1's generated.proto
// (CustomResourceDefinition.spec 2, Spec.versions 7, Version.name 1 and
// additionalPrinterColumns 6, ColumnDefinition name 1, type 2, priority 5,
// jsonPath 6), which protobuf compatibility keeps as they are.

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
)

// crdColumnsByVersion are a stored CustomResourceDefinition's printer
// columns by version name, each as its JSON reads (name, type, jsonPath,
// priority); nil when the value is neither protobuf nor an object.
func crdColumnsByVersion(b []byte) map[string][]map[string]any {
	if v := decodeValue(b); v.Object != nil {
		return crdColumnsOf(v.Object)
	}
	if !bytes.HasPrefix(b, protobufMagic) {
		return nil
	}
	var u runtime.Unknown
	if err := u.Unmarshal(b[len(protobufMagic):]); err != nil || u.Kind != "CustomResourceDefinition" {
		return nil
	}
	out := map[string][]map[string]any{}
	for _, spec := range protoFields(u.Raw, 2) {
		for _, ver := range protoFields(spec, 7) {
			name := ""
			for _, n := range protoFields(ver, 1) {
				name = string(n)
			}
			for _, col := range protoFields(ver, 6) {
				c := map[string]any{}
				for num, key := range map[protowire.Number]string{1: "name", 2: "type", 6: "jsonPath"} {
					for _, s := range protoFields(col, num) {
						c[key] = string(s)
					}
				}
				if p, ok := protoVarint(col, 5); ok {
					c["priority"] = int64(p)
				}
				out[name] = append(out[name], c)
			}
		}
	}
	return out
}

// crdColumnsOf reads the columns of a CustomResourceDefinition decoded
// from JSON or CBOR.
func crdColumnsOf(obj map[string]any) map[string][]map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	out := map[string][]map[string]any{}
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		cols, _ := m["additionalPrinterColumns"].([]any)
		for _, c := range cols {
			if cm, ok := c.(map[string]any); ok {
				out[name] = append(out[name], cm)
			}
		}
	}
	return out
}

// protoFields are the values of the length-delimited fields numbered num
// of message b; nil where b does not parse.
func protoFields(b []byte, num protowire.Number) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if typ == protowire.BytesType && n == num {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil
			}
			out = append(out, v)
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil
		}
		b = b[l:]
	}
	return out
}

// protoVarint is the last varint field numbered num of message b.
func protoVarint(b []byte, num protowire.Number) (uint64, bool) {
	var v uint64
	found := false
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, false
		}
		b = b[l:]
		if typ == protowire.VarintType && n == num {
			x, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return 0, false
			}
			v, found = x, true
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return 0, false
		}
		b = b[l:]
	}
	return v, found
}
