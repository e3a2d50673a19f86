package main

import (
	"bytes"
	"compress/flate"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The stored values decode as kube-apiserver decodes them, are the size
// asked for, and do not compress much.
func TestConfigMapEncoding(t *testing.T) {
	for _, size := range []int{300, 1024, 4096} {
		cms, err := newConfigMaps(size)
		if err != nil {
			t.Fatal(err)
		}
		first, err := cms.encode("bench-007", "cm-000042", 42, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(first, []byte("k8s\x00")) {
			t.Fatalf("size %d: value starts %q, want kube-apiserver's protobuf envelope", size, first[:8])
		}
		if d := len(first) - size; d < -4 || d > 4 {
			t.Errorf("size %d: encoded %d bytes", size, len(first))
		}
		obj, err := decodeObject(first)
		if err != nil {
			t.Fatal(err)
		}
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("decoded a %T", obj)
		}
		if cm.Namespace != "bench-007" || cm.Name != "cm-000042" || cm.UID == "" || len(cm.Data["payload"]) != cms.payload("bench-007", "cm-000042") {
			t.Errorf("decoded %s/%s uid %q payload %d bytes, want bench-007/cm-000042 with a uid and %d bytes", cm.Namespace, cm.Name, cm.UID, len(cm.Data["payload"]), cms.payload("bench-007", "cm-000042"))
		}
		// An update: the same object and size, other data.
		next, err := cms.encode("bench-007", "cm-000042", 42, 1)
		if err != nil {
			t.Fatal(err)
		}
		obj2, err := decodeObject(next)
		if err != nil {
			t.Fatal(err)
		}
		if len(next) != len(first) || obj2.(*corev1.ConfigMap).Data["payload"] == cm.Data["payload"] {
			t.Errorf("size %d: the update is %d bytes (the create %d), payload changed: %v", size, len(next), len(first), obj2.(*corev1.ConfigMap).Data["payload"] != cm.Data["payload"])
		}
		var z bytes.Buffer
		fw, _ := flate.NewWriter(&z, flate.BestCompression)
		fw.Write(first)
		fw.Close()
		if z.Len() < len(first)*6/10 {
			t.Errorf("size %d: compresses to %d of %d bytes", size, z.Len(), len(first))
		}
	}
}

func TestNamespaceEncoding(t *testing.T) {
	b, err := namespaceObject("bench-001", 7)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decodeObject(b)
	if err != nil {
		t.Fatal(err)
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok || ns.Name != "bench-001" || ns.Status.Phase != corev1.NamespaceActive {
		t.Fatalf("decoded %#v", obj)
	}
}

// The sampler sums the processes' RSS and keeps each phase's peak.
func TestRSSSampler(t *testing.T) {
	self := os.Getpid()
	s := startSampler([]int{self, self}, "a")
	one, err := readMemory(self)
	if err != nil {
		t.Fatal(err)
	}
	s.enter("b")
	end := s.finish()
	if p := s.peak("a"); p < one.rss || p > 4*one.rss {
		t.Errorf("phase a's peak %d, one process's RSS %d: want about twice", p, one.rss)
	}
	if s.peak("b") == 0 || end == 0 {
		t.Errorf("phase b's peak %d, end %d", s.peak("b"), end)
	}
	if s.finish() == 0 {
		t.Error("a second finish read nothing")
	}
}

// scale and tenants run only when named: `all` stays make bench's length.
func TestParseWorkloadsOnDemand(t *testing.T) {
	_, all, err := parseWorkloads("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range all {
		if w == "scale" || w == "tenants" {
			t.Errorf("all includes %s", w)
		}
	}
	table, got, err := parseWorkloads("scale,tenants,scale")
	if err != nil || table || len(got) != 2 || got[0] != "scale" || got[1] != "tenants" {
		t.Errorf("scale,tenants,scale: table %v, %v, %v", table, got, err)
	}
	if _, _, err := parseWorkloads("scales"); err == nil {
		t.Error("an unknown workload was accepted")
	}
}
