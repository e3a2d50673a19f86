// Package storagekey maps kube-apiserver's storage keys to the Kubernetes
// objects they hold, and back: "/registry/services/specs/default/web" is
// the Service default/web. The aggregated API (pkg/apiagg) uses it to ask
// kube-apiserver whether a caller may see or change the object a key
// holds; kubectl-quanty uses it to turn TYPE/NAME into a key.
//
// The table is kube-apiserver v1.37's layout under its --etcd-prefix
// (default /registry): a resource's objects live under
// PREFIX/<path>/[<namespace>/]<name>, where <path> is usually the resource's
// plural name, with historical exceptions (services under services/specs,
// endpoints under services/endpoints, nodes under minions,
// replicationcontrollers under controllers, ingresses under ingress), and
// resources served through the aggregation layer or custom resources under
// <group>/<plural>. It was taken from Kubernetes' own check of every
// built-in resource's key (test/integration/etcd/data.go in
// k8s.io/kubernetes v1.37.2) and is checked again by test/e2e.
package storagekey

import (
	"bytes"
	"fmt"
	"strings"
)

// DefaultPrefix is kube-apiserver's default --etcd-prefix.
const DefaultPrefix = "/registry"

// Resource is one kind of stored object: its API group ("" for the core
// group), its plural resource name, and whether it lives in namespaces.
type Resource struct {
	Group, Resource string
	Namespaced      bool
}

// String is resource.group, as kubectl and RBAC name it.
func (r Resource) String() string {
	if r.Group == "" {
		return r.Resource
	}
	return r.Resource + "." + r.Group
}

// Object is what one key holds.
type Object struct {
	Resource
	Namespace string // empty for cluster-scoped objects
	Name      string
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.Resource.String() + "/" + o.Name
	}
	return o.Resource.String() + "/" + o.Namespace + "/" + o.Name
}

// Scope is what a range of keys holds: every object of a resource in one
// namespace (Namespace set) or everywhere.
type Scope struct {
	Resource
	Namespace string
}

// builtin is kube-apiserver v1.37's table: the key path under the prefix,
// and the resource stored there. Where two groups serve one resource from
// one place (events and events.k8s.io events), the entry names the core
// group's, the one the objects are stored as.
var builtin = []struct {
	path string
	Resource
}{
	// Core (the "" group).
	{"configmaps", Resource{"", "configmaps", true}},
	{"services/endpoints", Resource{"", "endpoints", true}},
	{"events", Resource{"", "events", true}},
	{"limitranges", Resource{"", "limitranges", true}},
	{"namespaces", Resource{"", "namespaces", false}},
	{"minions", Resource{"", "nodes", false}},
	{"persistentvolumeclaims", Resource{"", "persistentvolumeclaims", true}},
	{"persistentvolumes", Resource{"", "persistentvolumes", false}},
	{"pods", Resource{"", "pods", true}},
	{"podtemplates", Resource{"", "podtemplates", true}},
	{"controllers", Resource{"", "replicationcontrollers", true}},
	{"resourcequotas", Resource{"", "resourcequotas", true}},
	{"secrets", Resource{"", "secrets", true}},
	{"serviceaccounts", Resource{"", "serviceaccounts", true}},
	{"services/specs", Resource{"", "services", true}},

	{"mutatingadmissionpolicies", Resource{"admissionregistration.k8s.io", "mutatingadmissionpolicies", false}},
	{"mutatingadmissionpolicybindings", Resource{"admissionregistration.k8s.io", "mutatingadmissionpolicybindings", false}},
	{"mutatingwebhookconfigurations", Resource{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", false}},
	{"validatingadmissionpolicies", Resource{"admissionregistration.k8s.io", "validatingadmissionpolicies", false}},
	{"validatingadmissionpolicybindings", Resource{"admissionregistration.k8s.io", "validatingadmissionpolicybindings", false}},
	{"validatingwebhookconfigurations", Resource{"admissionregistration.k8s.io", "validatingwebhookconfigurations", false}},

	{"apiextensions.k8s.io/customresourcedefinitions", Resource{"apiextensions.k8s.io", "customresourcedefinitions", false}},
	{"apiregistration.k8s.io/apiservices", Resource{"apiregistration.k8s.io", "apiservices", false}},

	{"controllerrevisions", Resource{"apps", "controllerrevisions", true}},
	{"daemonsets", Resource{"apps", "daemonsets", true}},
	{"deployments", Resource{"apps", "deployments", true}},
	{"replicasets", Resource{"apps", "replicasets", true}},
	{"statefulsets", Resource{"apps", "statefulsets", true}},

	{"horizontalpodautoscalers", Resource{"autoscaling", "horizontalpodautoscalers", true}},
	{"cronjobs", Resource{"batch", "cronjobs", true}},
	{"jobs", Resource{"batch", "jobs", true}},

	{"certificatesigningrequests", Resource{"certificates.k8s.io", "certificatesigningrequests", false}},
	{"clustertrustbundles", Resource{"certificates.k8s.io", "clustertrustbundles", false}},
	{"podcertificaterequests", Resource{"certificates.k8s.io", "podcertificaterequests", true}},

	{"leasecandidates", Resource{"coordination.k8s.io", "leasecandidates", true}},
	{"leases", Resource{"coordination.k8s.io", "leases", true}},
	{"endpointslices", Resource{"discovery.k8s.io", "endpointslices", true}},
	{"flowschemas", Resource{"flowcontrol.apiserver.k8s.io", "flowschemas", false}},
	{"prioritylevelconfigurations", Resource{"flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations", false}},
	{"storageversions", Resource{"internal.apiserver.k8s.io", "storageversions", false}},
	{"evictionrequests", Resource{"lifecycle.k8s.io", "evictionrequests", true}},
	{"evictions", Resource{"lifecycle.k8s.io", "evictions", true}},

	{"ingressclasses", Resource{"networking.k8s.io", "ingressclasses", false}},
	{"ingress", Resource{"networking.k8s.io", "ingresses", true}},
	{"ipaddresses", Resource{"networking.k8s.io", "ipaddresses", false}},
	{"networkpolicies", Resource{"networking.k8s.io", "networkpolicies", true}},
	{"servicecidrs", Resource{"networking.k8s.io", "servicecidrs", false}},

	{"runtimeclasses", Resource{"node.k8s.io", "runtimeclasses", false}},
	{"poddisruptionbudgets", Resource{"policy", "poddisruptionbudgets", true}},

	{"clusterrolebindings", Resource{"rbac.authorization.k8s.io", "clusterrolebindings", false}},
	{"clusterroles", Resource{"rbac.authorization.k8s.io", "clusterroles", false}},
	{"rolebindings", Resource{"rbac.authorization.k8s.io", "rolebindings", true}},
	{"roles", Resource{"rbac.authorization.k8s.io", "roles", true}},

	{"deviceclasses", Resource{"resource.k8s.io", "deviceclasses", false}},
	{"devicetaintrules", Resource{"resource.k8s.io", "devicetaintrules", false}},
	{"resourceclaims", Resource{"resource.k8s.io", "resourceclaims", true}},
	{"resourceclaimtemplates", Resource{"resource.k8s.io", "resourceclaimtemplates", true}},
	{"resourcepoolstatusrequests", Resource{"resource.k8s.io", "resourcepoolstatusrequests", false}},
	{"resourceslices", Resource{"resource.k8s.io", "resourceslices", false}},

	{"compositepodgroups", Resource{"scheduling.k8s.io", "compositepodgroups", true}},
	{"podgroups", Resource{"scheduling.k8s.io", "podgroups", true}},
	{"priorityclasses", Resource{"scheduling.k8s.io", "priorityclasses", false}},
	{"workloads", Resource{"scheduling.k8s.io", "workloads", true}},

	{"csidrivers", Resource{"storage.k8s.io", "csidrivers", false}},
	{"csinodes", Resource{"storage.k8s.io", "csinodes", false}},
	{"csistoragecapacities", Resource{"storage.k8s.io", "csistoragecapacities", true}},
	{"storageclasses", Resource{"storage.k8s.io", "storageclasses", false}},
	{"volumeattachments", Resource{"storage.k8s.io", "volumeattachments", false}},
	{"volumeattributesclasses", Resource{"storage.k8s.io", "volumeattributesclasses", false}},
	{"storageversionmigrations", Resource{"storagemigration.k8s.io", "storageversionmigrations", false}},
}

// servedAlso are resources that a second API group serves from another
// group's storage: a key names the storing group's resource, but a client
// that found the resource through discovery may name either.
var servedAlso = map[Resource]Resource{
	{"events.k8s.io", "events", true}: {"", "events", true},
}

// StoredAs is the resource whose objects r's are stored as, and which
// Parse names for their keys: r itself, unless another group serves it
// from the same place (events.k8s.io's events are the core group's).
func StoredAs(r Resource) Resource {
	for also, stored := range servedAlso {
		if also.Group == r.Group && also.Resource == r.Resource {
			return stored
		}
	}
	return r
}

// Table maps keys under one --etcd-prefix.
type Table struct {
	prefix string
	byPath map[string]Resource // "services/specs" -> services
	byGR   map[string]string   // "services" (resource.group) -> "services/specs"
}

// New is the table for kube-apiserver's --etcd-prefix (empty: DefaultPrefix).
func New(prefix string) *Table {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	t := &Table{prefix: strings.TrimSuffix(prefix, "/"), byPath: map[string]Resource{}, byGR: map[string]string{}}
	for _, b := range builtin {
		t.byPath[b.path] = b.Resource
		t.byGR[b.Resource.String()] = b.path
	}
	for also, stored := range servedAlso {
		t.byGR[also.String()] = t.byGR[stored.String()]
	}
	return t
}

// Prefix is the --etcd-prefix the table maps.
func (t *Table) Prefix() string { return t.prefix }

// Parse is the object key holds; ok is false for a key that holds no
// Kubernetes object (kube-apiserver's own bookkeeping, such as
// /registry/ranges/serviceips, or anything outside the prefix).
//
// A key under a path of the table is that resource's; any other key of the
// form PREFIX/<group>/<plural>/[<namespace>/]<name>, where the group has a
// dot (as every custom resource's must), is a custom resource's, namespaced
// when it has the namespace segment (names never hold a slash).
func (t *Table) Parse(key []byte) (Object, bool) {
	parts, ok := t.split(key)
	if !ok {
		return Object{}, false
	}
	r, depth, custom, ok := t.resourceOf(parts)
	if !ok {
		return Object{}, false
	}
	if custom {
		r.Namespaced = len(parts) == depth+2
	}
	return objectIn(r, parts[depth:])
}

// split is the key's segments below the prefix.
func (t *Table) split(key []byte) ([]string, bool) {
	rest, ok := bytes.CutPrefix(key, []byte(t.prefix+"/"))
	if !ok {
		return nil, false
	}
	return strings.Split(string(rest), "/"), true
}

// resourceOf is the resource whose path begins parts, and how many
// segments that path has; custom is set for a custom resource (whose
// namespacedness the key's depth tells).
func (t *Table) resourceOf(parts []string) (r Resource, depth int, custom, ok bool) {
	for _, n := range []int{2, 1} { // "services/specs" before "services"
		if len(parts) > n {
			if r, ok := t.byPath[strings.Join(parts[:n], "/")]; ok {
				return r, n, false, true
			}
		}
	}
	if len(parts) >= 3 && strings.Contains(parts[0], ".") {
		return Resource{Group: parts[0], Resource: parts[1]}, 2, true, true
	}
	return Resource{}, 0, false, false
}

// objectIn names the object from the segments after the resource's path:
// [namespace, name] or [name].
func objectIn(r Resource, segs []string) (Object, bool) {
	want := 1
	if r.Namespaced {
		want = 2
	}
	if len(segs) != want {
		return Object{}, false
	}
	for _, s := range segs {
		if s == "" {
			return Object{}, false
		}
	}
	o := Object{Resource: r, Name: segs[len(segs)-1]}
	if r.Namespaced {
		o.Namespace = segs[0]
	}
	return o, true
}

// Key is where kube-apiserver stores an object. A resource that is not a
// built-in one is taken as a custom resource (its group must have a dot).
func (t *Table) Key(o Object) (string, error) {
	if o.Name == "" || strings.Contains(o.Name, "/") || strings.Contains(o.Namespace, "/") {
		return "", fmt.Errorf("storagekey: %q is not an object name", o.Name)
	}
	if o.Namespaced != (o.Namespace != "") {
		return "", fmt.Errorf("storagekey: %s is namespaced: %v, but the namespace is %q", o.Resource, o.Namespaced, o.Namespace)
	}
	p, err := t.path(o.Resource)
	if err != nil {
		return "", err
	}
	if o.Namespaced {
		return p + "/" + o.Namespace + "/" + o.Name, nil
	}
	return p + "/" + o.Name, nil
}

// ScopePrefix is the key prefix of every object of s: in its namespace, or
// everywhere when s.Namespace is empty. It ends with a slash.
func (t *Table) ScopePrefix(s Scope) (string, error) {
	if s.Namespace != "" && !s.Namespaced {
		return "", fmt.Errorf("storagekey: %s is not namespaced", s.Resource)
	}
	p, err := t.path(s.Resource)
	if err != nil {
		return "", err
	}
	if s.Namespace != "" {
		return p + "/" + s.Namespace + "/", nil
	}
	return p + "/", nil
}

func (t *Table) path(r Resource) (string, error) {
	if p, ok := t.byGR[r.String()]; ok {
		return t.prefix + "/" + p, nil
	}
	if !strings.Contains(r.Group, ".") || r.Resource == "" {
		return "", fmt.Errorf("storagekey: %s is not a resource kube-apiserver v1.37 stores, nor a custom resource", r)
	}
	return t.prefix + "/" + r.Group + "/" + r.Resource, nil
}

// RangeScope is the narrowest scope holding every key of [key, end) (end
// as etcd reads a range_end: empty for the single key, "\x00" for every key
// from key on); ok is false when the range reaches past one resource, or
// holds no Kubernetes objects.
//
// A range inside one namespace's keys of a custom resource is that
// namespace's even if the resource turns out to be cluster-scoped: its
// objects' keys have no namespace segment, so such a range holds none of
// them.
func (t *Table) RangeScope(key, end []byte) (Scope, bool) {
	if len(end) == 0 {
		o, ok := t.Parse(key)
		return Scope{Resource: o.Resource, Namespace: o.Namespace}, ok
	}
	parts, ok := t.split(key)
	if !ok {
		return Scope{}, false
	}
	r, depth, custom, ok := t.resourceOf(parts)
	if !ok {
		return Scope{}, false
	}
	base := t.prefix + "/" + strings.Join(parts[:depth], "/") + "/"
	if ns := parts[depth]; (r.Namespaced || custom) && ns != "" && len(parts) > depth+1 && within(key, end, base+ns+"/") {
		r.Namespaced = true
		return Scope{Resource: r, Namespace: ns}, true
	}
	if within(key, end, base) {
		return Scope{Resource: r}, true
	}
	return Scope{}, false
}

// within reports whether every key of [key, end) starts with prefix p.
func within(key, end []byte, p string) bool {
	if !bytes.HasPrefix(key, []byte(p)) {
		return false
	}
	if len(end) == 1 && end[0] == 0 {
		return false // every key from key on: past any prefix
	}
	// The smallest key above every key with prefix p is p with its last
	// byte increased ('/' + 1 == '0').
	limit := []byte(p)
	limit[len(limit)-1]++
	return bytes.Compare(end, limit) <= 0
}
