package testing

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func resources(gv string, rs ...metav1.APIResource) metav1.APIResourceList {
	for i := range rs {
		if rs[i].Verbs == nil {
			rs[i].Verbs = metav1.Verbs{"create", "delete", "get", "list", "update", "watch"}
		}
	}
	return metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: rs}
}

func group(name string, versions ...string) metav1.APIGroup {
	g := metav1.APIGroup{Name: name}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

// Discovery is a small API server's discovery: a few core resources
// (with a subresource and a create-only one, which hold no objects),
// apps, RBAC, EndpointSlices, events.k8s.io, leases, a custom resource and
// the aggregated API itself.
func Discovery() map[string]any {
	ns := func(name, singular, kind string, short ...string) metav1.APIResource {
		return metav1.APIResource{Name: name, SingularName: singular, Kind: kind, Namespaced: true, ShortNames: short}
	}
	cl := func(name, singular, kind string, short ...string) metav1.APIResource {
		return metav1.APIResource{Name: name, SingularName: singular, Kind: kind, ShortNames: short}
	}
	return map[string]any{
		"/api/v1": resources("v1",
			metav1.APIResource{Name: "bindings", SingularName: "binding", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			ns("configmaps", "configmap", "ConfigMap", "cm"),
			ns("endpoints", "endpoints", "Endpoints", "ep"),
			ns("events", "event", "Event", "ev"),
			cl("namespaces", "namespace", "Namespace", "ns"),
			cl("nodes", "node", "Node", "no"),
			ns("pods", "pod", "Pod", "po"),
			ns("pods/status", "", "Pod"),
			ns("secrets", "secret", "Secret"),
			ns("serviceaccounts", "serviceaccount", "ServiceAccount", "sa"),
			ns("services", "service", "Service", "svc"),
		),
		"/apis": metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{
			group("apps", "v1"), group("events.k8s.io", "v1"), group("rbac.authorization.k8s.io", "v1"),
			group("discovery.k8s.io", "v1"), group("coordination.k8s.io", "v1"), group("example.com", "v1", "v1beta1"), group("quanty.quantyroot.io", "v1alpha1"),
		}},
		"/apis/apps/v1":                      resources("apps/v1", ns("deployments", "deployment", "Deployment", "deploy"), ns("replicasets", "replicaset", "ReplicaSet", "rs")),
		"/apis/events.k8s.io/v1":             resources("events.k8s.io/v1", ns("events", "event", "Event", "ev")),
		"/apis/rbac.authorization.k8s.io/v1": resources("rbac.authorization.k8s.io/v1", cl("clusterroles", "clusterrole", "ClusterRole"), ns("rolebindings", "rolebinding", "RoleBinding"), ns("roles", "role", "Role")),
		"/apis/discovery.k8s.io/v1":          resources("discovery.k8s.io/v1", ns("endpointslices", "endpointslice", "EndpointSlice")),
		"/apis/coordination.k8s.io/v1":       resources("coordination.k8s.io/v1", ns("leases", "lease", "Lease")),
		"/apis/example.com/v1":               resources("example.com/v1", ns("widgets", "widget", "Widget", "wd")),
		"/apis/example.com/v1beta1":          resources("example.com/v1beta1", ns("widgets", "widget", "Widget", "wd")),
		"/apis/quanty.quantyroot.io/v1alpha1": resources("quanty.quantyroot.io/v1alpha1",
			metav1.APIResource{Name: "logs", Kind: "Log", Verbs: metav1.Verbs{"list"}},
			metav1.APIResource{Name: "restores", Kind: "Restore", Verbs: metav1.Verbs{"create"}}),
	}
}
