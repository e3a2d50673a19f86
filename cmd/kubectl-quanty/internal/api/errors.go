package api

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/client"
)

// ErrForbidden marks a refusal, so that a listing over many resources can
// go on past the ones the caller may not read.
var ErrForbidden = errors.New("forbidden")

// ErrOutsideRetention marks a revision or time that QuantyKube no longer
// (or not yet) holds. A resource may be kept for less than others
// (--retain-prefix: leases by default), so that a listing over many
// resources meets it for some only.
var ErrOutsideRetention = errors.New("outside the history QuantyKube retains (its --retain window)")

// ErrConflict marks a restore refused because the object is no longer in
// the state the plugin showed (the request's if_mod_revision).
var ErrConflict = errors.New("conflict")

// forbiddenWhat reads kube-apiserver's wording of a refusal (which
// pkg/apiagg uses too): the verb, resource, group and namespace refused.
var forbiddenWhat = regexp.MustCompile(`cannot (\S+) resource "([^"]*)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?`)

// Explain turns a failed request into what a person needs to know: which
// permission is missing, that the API is not registered or not available,
// that a revision is outside the retention window.
func Explain(err error) error {
	var se *client.StatusError
	if !errors.As(err, &se) || se.Reason == "" {
		return err
	}
	msg := se.Message
	switch se.Reason {
	case "NotFound":
		return fmt.Errorf("kube-apiserver does not serve %s/%s: the APIService %s is not registered, so QuantyKube's history is not reachable through this cluster (%s)",
			Group, Version, APIService, msg)
	case "ServiceUnavailable":
		return fmt.Errorf("the APIService %s is not available: kube-apiserver cannot reach QuantyKube's aggregated API (kubectl get apiservice %s says why): %s",
			APIService, APIService, msg)
	case "Conflict":
		return fmt.Errorf("%w: %s", ErrConflict, strings.TrimPrefix(msg, "quantykube: "))
	case "Invalid":
		return errors.New(msg)
	case "Expired":
		return fmt.Errorf("%w, or in the future: %s", ErrOutsideRetention, strings.TrimPrefix(msg, "quantykube: "))
	case "Forbidden":
		m := forbiddenWhat.FindStringSubmatch(msg)
		if m == nil {
			return fmt.Errorf("%w: %s", ErrForbidden, msg)
		}
		verb, resource, group, ns := m[1], m[2], m[3], m[4]
		if group == Group {
			return fmt.Errorf("%w: RBAC does not let you %s %s.%s: reading history needs a role with list on logs, objects and changes, restoring one with create on restores, in the API group %s (%s)",
				ErrForbidden, verb, resource, group, Group, msg)
		}
		what := resource
		if group != "" {
			what += "." + group
		}
		where := "cluster-wide"
		if ns != "" {
			where = "in the namespace " + ns
		}
		return fmt.Errorf("%w: history is never wider than access to the object itself, and you may not %s %s %s (%s)",
			ErrForbidden, verb, what, where, msg)
	}
	return fmt.Errorf("%s: %s", se.Reason, msg)
}
