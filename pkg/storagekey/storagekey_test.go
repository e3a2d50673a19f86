package storagekey

import "testing"

// kube-apiserver v1.37's own expectations for a sample of resources,
// exceptions first (test/integration/etcd/data.go in k8s.io/kubernetes).
func TestParseKubeAPIServerKeys(t *testing.T) {
	tab := New("")
	cases := []struct {
		key  string
		want Object
	}{
		{"/registry/services/specs/ns1/web", Object{Resource{"", "services", true}, "ns1", "web"}},
		{"/registry/services/endpoints/ns1/web", Object{Resource{"", "endpoints", true}, "ns1", "web"}},
		{"/registry/minions/node-1", Object{Resource{"", "nodes", false}, "", "node-1"}},
		{"/registry/controllers/ns1/rc1", Object{Resource{"", "replicationcontrollers", true}, "ns1", "rc1"}},
		{"/registry/ingress/ns1/in1", Object{Resource{"networking.k8s.io", "ingresses", true}, "ns1", "in1"}},
		{"/registry/secrets/kube-system/token", Object{Resource{"", "secrets", true}, "kube-system", "token"}},
		{"/registry/clusterrolebindings/cluster-admin", Object{Resource{"rbac.authorization.k8s.io", "clusterrolebindings", false}, "", "cluster-admin"}},
		{"/registry/deployments/ns1/d1", Object{Resource{"apps", "deployments", true}, "ns1", "d1"}},
		{"/registry/events/ns1/e.123", Object{Resource{"", "events", true}, "ns1", "e.123"}},
		{"/registry/leases/kube-node-lease/n1", Object{Resource{"coordination.k8s.io", "leases", true}, "kube-node-lease", "n1"}},
		{"/registry/clustertrustbundles/example.com:signer:abc", Object{Resource{"certificates.k8s.io", "clustertrustbundles", false}, "", "example.com:signer:abc"}},
		{"/registry/ipaddresses/192.168.1.3", Object{Resource{"networking.k8s.io", "ipaddresses", false}, "", "192.168.1.3"}},
		{"/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.e2e.io", Object{Resource{"apiextensions.k8s.io", "customresourcedefinitions", false}, "", "widgets.e2e.io"}},
		{"/registry/apiregistration.k8s.io/apiservices/v1alpha1.quanty.quantyroot.io", Object{Resource{"apiregistration.k8s.io", "apiservices", false}, "", "v1alpha1.quanty.quantyroot.io"}},
		// Custom resources: namespaced by their depth.
		{"/registry/cr.bar.com/foos/ns1/cr1foo", Object{Resource{"cr.bar.com", "foos", true}, "ns1", "cr1foo"}},
		{"/registry/awesome.bears.com/pandas/cr3panda", Object{Resource{"awesome.bears.com", "pandas", false}, "", "cr3panda"}},
	}
	for _, c := range cases {
		got, ok := tab.Parse([]byte(c.key))
		if !ok || got != c.want {
			t.Errorf("Parse(%q) = %+v %v, want %+v", c.key, got, ok, c.want)
			continue
		}
		back, err := tab.Key(got)
		if err != nil || back != c.key {
			t.Errorf("Key(%+v) = %q %v, want %q", got, back, err, c.key)
		}
	}
}

// Keys that hold no object of the API map to nothing, so that only raw
// access reaches them.
func TestParseNonObjects(t *testing.T) {
	tab := New("")
	for _, key := range []string{
		"/registry/ranges/serviceips",
		"/registry/ranges/servicenodeports",
		"/registry/masterleases/10.0.0.1",
		"compact_rev_key",
		"/registry/secrets/ns1",           // a namespace, no name
		"/registry/secrets/ns1/a/b",       // too deep
		"/registry/secrets//name",         // empty namespace
		"/registry/namespaces/a/b",        // cluster-scoped with a namespace
		"/registry/nodotgroup/things/x",   // not a custom resource's group
		"/registry/services/specs",        // the path alone
		"/other/secrets/ns1/s1",           // another prefix
		"/registryx/secrets/ns1/s1",       // not the prefix's folder
		"/registry/cr.bar.com/foos",       // no name
		"/registry/cr.bar.com/foos/a/b/c", // too deep
	} {
		if o, ok := tab.Parse([]byte(key)); ok {
			t.Errorf("Parse(%q) = %+v, want no object", key, o)
		}
	}
}

// Every entry of the table round-trips, and no two resources share a path.
func TestTableRoundTrips(t *testing.T) {
	tab := New("/custom/prefix/")
	seen := map[string]bool{}
	for _, b := range builtin {
		if seen[b.String()] {
			t.Errorf("%s twice in the table", b.Resource)
		}
		seen[b.String()] = true
		o := Object{Resource: b.Resource, Name: "n"}
		if b.Namespaced {
			o.Namespace = "ns"
		}
		key, err := tab.Key(o)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := tab.Parse([]byte(key)); !ok || got != o {
			t.Errorf("%s: Parse(Key) = %+v %v", b.Resource, got, ok)
		}
	}
	if _, err := tab.Key(Object{Resource: Resource{"", "widgets", true}, Namespace: "ns", Name: "n"}); err == nil {
		t.Error("Key of an unknown core resource succeeded")
	}
	if _, err := tab.Key(Object{Resource: Resource{"", "secrets", true}, Name: "n"}); err == nil {
		t.Error("Key of a namespaced object without a namespace succeeded")
	}
}

func TestRangeScope(t *testing.T) {
	tab := New("")
	cases := []struct {
		key, end string
		want     Scope
		ok       bool
	}{
		{"/registry/secrets/ns1/", "/registry/secrets/ns10", Scope{Resource{"", "secrets", true}, "ns1"}, true},
		{"/registry/secrets/ns1/a", "/registry/secrets/ns1/b", Scope{Resource{"", "secrets", true}, "ns1"}, true},
		{"/registry/secrets/", "/registry/secrets0", Scope{Resource{"", "secrets", true}, ""}, true},
		{"/registry/secrets/ns1/", "/registry/secrets/ns2/", Scope{Resource{"", "secrets", true}, ""}, true},
		{"/registry/services/specs/ns1/", "/registry/services/specs/ns10", Scope{Resource{"", "services", true}, "ns1"}, true},
		{"/registry/clusterroles/", "/registry/clusterroles0", Scope{Resource{"rbac.authorization.k8s.io", "clusterroles", false}, ""}, true},
		{"/registry/cr.bar.com/foos/ns1/", "/registry/cr.bar.com/foos/ns10", Scope{Resource{"cr.bar.com", "foos", true}, "ns1"}, true},
		{"/registry/cr.bar.com/foos/", "/registry/cr.bar.com/foos0", Scope{Resource{"cr.bar.com", "foos", false}, ""}, true},
		{"/registry/secrets/ns1/s1", "", Scope{Resource{"", "secrets", true}, "ns1"}, true},
		// Past one resource, or everything from a key on: raw.
		{"/registry/secrets/", "/registry/serviceaccounts/", Scope{}, false},
		{"/registry/secrets/", "\x00", Scope{}, false},
		{"/registry/", "/registry0", Scope{}, false},
		{"/registry/ranges/", "/registry/ranges0", Scope{}, false},
		// A range starting just before a resource's keys is not inside them.
		{"/registry/secrets", "/registry/secrets0", Scope{}, false},
	}
	for _, c := range cases {
		got, ok := tab.RangeScope([]byte(c.key), []byte(c.end))
		if ok != c.ok || got != c.want {
			t.Errorf("RangeScope(%q, %q) = %+v %v, want %+v %v", c.key, c.end, got, ok, c.want, c.ok)
		}
	}
}

// events.k8s.io serves the core group's events from their storage: a
// client that found "events.events.k8s.io" through discovery reaches the
// same keys, which read back as the core group's.
func TestServedByTwoGroups(t *testing.T) {
	tab := New("")
	ev := Object{Resource: Resource{"events.k8s.io", "events", true}, Namespace: "ns1", Name: "e1"}
	key, err := tab.Key(ev)
	if err != nil || key != "/registry/events/ns1/e1" {
		t.Fatalf("Key(%+v) = %q %v, want /registry/events/ns1/e1", ev, key, err)
	}
	if p, err := tab.ScopePrefix(Scope{Resource: ev.Resource, Namespace: "ns1"}); err != nil || p != "/registry/events/ns1/" {
		t.Fatalf("ScopePrefix = %q %v", p, err)
	}
	if o, ok := tab.Parse([]byte(key)); !ok || o.Resource != (Resource{"", "events", true}) {
		t.Fatalf("Parse(%q) = %+v %v, want the core group's events", key, o, ok)
	}
}
