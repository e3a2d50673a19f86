package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/client"
	"github.com/quantyroot/quantykube/pkg/apiagg"
)

// The API's name is pkg/apiagg's.
func TestGroupVersion(t *testing.T) {
	if Group != apiagg.Group || Version != apiagg.Version {
		t.Fatalf("the plugin reaches %s/%s, pkg/apiagg serves %s/%s", Group, Version, apiagg.Group, apiagg.Version)
	}
}

// kube-apiserver's own refusals, in its words, and the aggregator's.
func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		reason, message, want string
		is                    error
	}{
		{"Forbidden", `logs.quanty.quantyroot.io is forbidden: User "bob" cannot list resource "logs" in API group "quanty.quantyroot.io" at the cluster scope`,
			"RBAC does not let you list logs.quanty.quantyroot.io: reading history needs a role with list on logs, objects and changes", ErrForbidden},
		{"Forbidden", `restores.quanty.quantyroot.io is forbidden: User "bob" cannot create resource "restores" in API group "quanty.quantyroot.io" at the cluster scope`,
			"restoring one with create on restores", ErrForbidden},
		{"Forbidden", `secrets "db" is forbidden: User "bob" cannot get resource "secrets" in API group "" in the namespace "shop": (history is never wider than access to the object)`,
			"you may not get secrets in the namespace shop", ErrForbidden},
		{"Forbidden", `clusterrolebindings.rbac.authorization.k8s.io "admin" is forbidden: User "bob" cannot get resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope`,
			"you may not get clusterrolebindings.rbac.authorization.k8s.io cluster-wide", ErrForbidden},
		{"Forbidden", "something else", "forbidden: something else", ErrForbidden},
		{"ServiceUnavailable", "the server is currently unable to handle the request", "the APIService v1alpha1.quanty.quantyroot.io is not available", nil},
		{"NotFound", "the server could not find the requested resource", "is not registered", nil},
		{"Expired", "quantykube: revision 3 is older than the oldest retained revision 5 (2026-05-01T12:00:00.000Z)",
			"outside the history QuantyKube retains (its --retain window), or in the future: revision 3 is older than the oldest retained revision 5", ErrOutsideRetention},
		{"Conflict", "quantykube: the key changed", "conflict: the key changed", ErrConflict},
		{"Invalid", "The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set", "The ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable", nil},
		{"TooManyRequests", "slow down", "TooManyRequests: slow down", nil},
		{"", "an error on the server", "an error on the server", nil},
	} {
		err := Explain(&client.StatusError{Reason: tc.reason, Message: tc.message})
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("Explain(%s: %q) = %v, want %q", tc.reason, tc.message, err, tc.want)
		}
	}
	other := errors.New("kubectl get --raw /x: The connection to the server localhost:8080 was refused")
	if err := Explain(other); err != other {
		t.Errorf("Explain of kubectl's own failure = %v", err)
	}
}
