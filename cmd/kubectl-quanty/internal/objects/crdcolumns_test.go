package objects

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/runtime"
)

// A CustomResourceDefinition stored as Kubernetes protobuf, as
// kube-apiserver stores it: its printer columns are read without its Go
// types.
func TestCRDColumnsFromProtobuf(t *testing.T) {
	str := func(b []byte, n protowire.Number, s string) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), []byte(s))
	}
	msg := func(b []byte, n protowire.Number, m []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), m)
	}
	col := str(str(str(nil, 1, "Size"), 2, "integer"), 6, ".spec.size")
	wide := protowire.AppendVarint(protowire.AppendTag(str(str(nil, 1, "Color"), 6, ".spec.color"), 5, protowire.VarintType), 1)
	version := msg(msg(str(nil, 1, "v1"), 6, col), 6, wide)
	crd := msg(nil, 2, msg(str(nil, 1, "example.com"), 7, version))
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}, Raw: crd}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got := CRDColumnsByVersion(append([]byte("k8s\x00"), b...))
	want := map[string][]map[string]any{"v1": {{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}, {"name": "Color", "jsonPath": ".spec.color", "priority": int64(1)}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("columns = %v, want %v", got, want)
	}
}

// A CustomResourceDefinition as kube-apiserver v1.37 stores it:
// apiextensions.k8s.io/v1beta1 JSON, the columns on the spec.
func TestCRDColumnsV1beta1(t *testing.T) {
	stored := `{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"CustomResourceDefinition","metadata":{"name":"sprockets.e2e.quantykube.io"},` +
		`"spec":{"additionalPrinterColumns":[{"JSONPath":".spec.size","name":"Size","type":"integer"}],"versions":[{"name":"v1"},` +
		`{"name":"v2","additionalPrinterColumns":[{"JSONPath":".spec.color","name":"Color","type":"string"}]}]}}`
	got := CRDColumnsByVersion([]byte(stored))
	if len(got["v1"]) != 1 || got["v1"][0]["jsonPath"] != ".spec.size" || len(got["v2"]) != 1 || got["v2"][0]["name"] != "Color" {
		t.Errorf("columns = %v", got)
	}
}
