package objects

// A CustomResourceDefinition as kube-apiserver stores it, for one small
// read: the additionalPrinterColumns of each version. v1.37 stores them as
// JSON (apiextensions.k8s.io/v1beta1); one stored as Kubernetes protobuf
// (apiextensions.k8s.io/v1, whose Go types, k8s.io/apiextensions-apiserver,
// this plugin does not link) is read field by field. The field numbers are apiextensions.k8s.io/v1's generated.proto
// (CustomResourceDefinition.spec 2, Spec.versions 7, Version.name 1 and
// additionalPrinterColumns 6, ColumnDefinition name 1, type 2, priority 5,
// jsonPath 6), which protobuf compatibility keeps as they are.

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
)

// CRDColumnsByVersion are a stored CustomResourceDefinition's printer
// columns by version name, each as its JSON reads (name, type, jsonPath,
// priority); nil when the value is neither protobuf nor an object.
func CRDColumnsByVersion(b []byte) map[string][]map[string]any {
	if v := Decode(b); v.Object != nil {
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
// from JSON or CBOR: kube-apiserver v1.37 stores them as
// apiextensions.k8s.io/v1beta1 JSON, whose columns are the spec's for
// every version unless a version has its own, and whose column names
// its path JSONPath (v1: jsonPath, per version).
func crdColumnsOf(obj map[string]any) map[string][]map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	columns := func(m map[string]any) ([]map[string]any, bool) {
		list, ok := m["additionalPrinterColumns"].([]any)
		var out []map[string]any
		for _, c := range list {
			if cm, ok := c.(map[string]any); ok {
				if p, ok := cm["JSONPath"]; ok {
					cm["jsonPath"] = p
				}
				out = append(out, cm)
			}
		}
		return out, ok
	}
	shared, _ := columns(spec)
	out := map[string][]map[string]any{}
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if own, ok := columns(m); ok {
			out[name] = own
		} else {
			out[name] = shared
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
