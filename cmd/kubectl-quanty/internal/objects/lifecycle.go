package objects

// Where an object is in its life: being deleted, its newest state from
// before that, and whether a controller, rather than a restore, brings it
// back.

import (
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// BeingDeleted says why the object in kv was being deleted, or "".
func BeingDeleted(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return ""
	}
	v := Decode(kv.Value)
	if v.Object == nil || v.U().GetDeletionTimestamp() == nil {
		return ""
	}
	why := "deletionTimestamp " + v.U().GetDeletionTimestamp().UTC().Format("2006-01-02T15:04:05Z")
	if f := v.U().GetFinalizers(); len(f) > 0 {
		why += ", finalizers " + strings.Join(f, ", ")
	}
	return why
}

// Restorable is the newest state of a key, at or before revision upto,
// of an object that was not being deleted, from the key's log (oldest
// first): what to restore to bring back an object whose deletion began
// at some point.
func Restorable(entries []*historypb.LogEntry, upto int64) (int64, *mvccpb.KeyValue, bool) {
	var rev int64
	var kv *mvccpb.KeyValue
	consider := func(r int64, k *mvccpb.KeyValue) {
		if r <= upto && k != nil && BeingDeleted(k) == "" {
			rev, kv = r, k
		}
	}
	if len(entries) > 0 {
		if p := entries[0].GetPrevKv(); p != nil {
			consider(p.ModRevision, p)
		}
	}
	for _, e := range entries {
		if e.GetDeleted() == 0 {
			consider(e.GetRevision(), e.GetKv())
		}
	}
	return rev, kv, kv != nil
}

// Rank orders restores so that what an object needs exists before it:
// the namespace, its quotas and limits, Roles and their bindings,
// ServiceAccounts, ConfigMaps and Secrets, everything else (Services,
// claims, policies, custom resources), workload controllers, bare Pods,
// then what refers to workloads (autoscalers, disruption budgets).
func Rank(r storagekey.Resource) int {
	switch r.String() {
	case "namespaces":
		return 0
	case "resourcequotas", "limitranges":
		return 1
	case "roles.rbac.authorization.k8s.io":
		return 2
	case "rolebindings.rbac.authorization.k8s.io":
		return 3
	case "serviceaccounts":
		return 4
	case "configmaps", "secrets":
		return 5
	case "deployments.apps", "statefulsets.apps", "daemonsets.apps", "replicasets.apps", "replicationcontrollers",
		"jobs.batch", "cronjobs.batch":
		return 7
	case "pods":
		return 8
	case "horizontalpodautoscalers.autoscaling", "poddisruptionbudgets.policy":
		return 9
	}
	return 6
}

// SkipReason says why a controller, not a restore, brings back the object
// name of resource r in kv, or why it must not come back; "" to restore
// it. services are the names of the Services in its namespace that exist
// or come back.
func SkipReason(r storagekey.Resource, name string, kv *mvccpb.KeyValue, services map[string]bool) string {
	if why := BeingDeleted(kv); why != "" {
		return "it was already being deleted (" + why + ")"
	}
	v := Decode(kv.Value)
	if v.Object == nil {
		return ""
	}
	u := v.U()
	for _, ref := range u.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			return fmt.Sprintf("its controller recreates it (owner %s/%s)", ref.Kind, ref.Name)
		}
	}
	switch r.String() {
	case "endpoints":
		if services[name] {
			return "the endpoints controller recreates it for its Service"
		}
	case "secrets":
		if t, _, _ := unstructured.NestedString(u.Object, "type"); t == string(corev1.SecretTypeServiceAccountToken) {
			return "a ServiceAccount token: kube-controller-manager's token controller manages it"
		}
	case "configmaps":
		if name == "kube-root-ca.crt" {
			return "kube-controller-manager publishes it in every namespace"
		}
	case "serviceaccounts":
		if name == "default" {
			return "kube-controller-manager creates it in every namespace"
		}
	}
	return ""
}
