package apiagg

import (
	"mime"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Discovery: what the aggregator and kubectl read to find the API. The
// aggregator marks the APIService Available only when the group-version
// answers; a failing discovery stalls namespace deletion cluster-wide.

var groupVersion = metav1.GroupVersionForDiscovery{GroupVersion: Group + "/" + Version, Version: Version}

// resources are the endpoints. GET on a resource without a name is
// kube-apiserver's verb "list", so logs, objects and changes are listed, not got:
// RBAC grants list on them (deploy/aggregated-api/rbac.yaml).
var resources = []metav1.APIResource{
	{Name: "logs", SingularName: "log", Namespaced: false, Kind: "Log", Verbs: metav1.Verbs{"list"}},
	{Name: "objects", SingularName: "object", Namespaced: false, Kind: "Object", Verbs: metav1.Verbs{"list"}},
	{Name: "changes", SingularName: "change", Namespaced: false, Kind: "Change", Verbs: metav1.Verbs{"list"}},
	{Name: "restores", SingularName: "restore", Namespaced: false, Kind: "Restore", Verbs: metav1.Verbs{"create"}},
}

func apiResourceList() *metav1.APIResourceList {
	return &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: groupVersion.GroupVersion,
		APIResources: resources,
	}
}

func apiGroup() *metav1.APIGroup {
	return &metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             Group,
		Versions:         []metav1.GroupVersionForDiscovery{groupVersion},
		PreferredVersion: groupVersion,
	}
}

// aggregatedDiscovery is the APIGroupDiscoveryList kube-apiserver asks
// aggregated servers for first (it falls back to the group-version when
// answered 406).
func aggregatedDiscovery() *apidiscoveryv2.APIGroupDiscoveryList {
	var rs []apidiscoveryv2.APIResourceDiscovery
	for _, r := range resources {
		rs = append(rs, apidiscoveryv2.APIResourceDiscovery{
			Resource:         r.Name,
			SingularResource: r.SingularName,
			ResponseKind:     &metav1.GroupVersionKind{Group: Group, Version: Version, Kind: r.Kind},
			Scope:            apidiscoveryv2.ScopeCluster,
			Verbs:            r.Verbs,
		})
	}
	return &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items: []apidiscoveryv2.APIGroupDiscovery{{
			ObjectMeta: metav1.ObjectMeta{Name: Group},
			Versions: []apidiscoveryv2.APIVersionDiscovery{{
				Version: Version, Resources: rs, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
			}},
		}},
	}
}

const discoveryMediaType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// serveAPIs answers GET /apis: the aggregated discovery document when the
// Accept header asks for it (and allows it), the plain group list when it
// allows JSON, and 406 otherwise, never 200 with something else.
func serveAPIs(w http.ResponseWriter, r *http.Request) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		accept = "application/json"
	}
	for _, a := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(a))
		if err != nil {
			continue
		}
		switch {
		case mt == "application/json" && params["g"] == "apidiscovery.k8s.io" && params["v"] == "v2" && params["as"] == "APIGroupDiscoveryList":
			writeJSONAs(w, http.StatusOK, discoveryMediaType, aggregatedDiscovery())
			return
		case (mt == "application/json" || mt == "*/*" || mt == "application/*") && params["g"] == "" && params["as"] == "":
			writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{*apiGroup()}})
			return
		}
	}
	writeStatus(w, notAcceptable(accept))
}
