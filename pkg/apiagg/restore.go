package apiagg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// How a restore is checked against what kube-apiserver would let the
// caller write (--api-restore-check; docs/AGGREGATED-API.md, ADR-025).
const (
	// RestoreCheckDryRun asks kube-apiserver, as the caller, for a dry run
	// of the very change before it is written: RBAC (escalate and bind
	// included), validation, immutable fields and admission all decide.
	RestoreCheckDryRun = "dry-run"
	// RestoreCheckNone writes after the SubjectAccessReviews alone, and
	// leaves the objects whose writes kube-apiserver checks beyond RBAC
	// verbs (sensitiveResource) to the raw-access groups.
	RestoreCheckNone = "none"
)

// sensitiveResource is what a restore may not write without a dry run but
// for the raw-access groups: RBAC objects (kube-apiserver checks escalate
// and bind on them, which no SubjectAccessReview of the verb sees),
// admission configuration, APIServices and CustomResourceDefinitions
// (where a group's requests go), certificates, Namespaces and Nodes.
func sensitiveResource(r storagekey.Resource) bool {
	switch r.Group {
	case "rbac.authorization.k8s.io", "admissionregistration.k8s.io", "apiregistration.k8s.io", "apiextensions.k8s.io", "certificates.k8s.io":
		return true
	case "":
		return r.Resource == "namespaces" || r.Resource == "nodes"
	}
	return false
}

// serveRestore authorizes before it resolves anything: the key must hold
// an object the caller may get (or, for a key that holds none, the caller
// must be in a raw-access group), whatever revision or time is asked, so
// that a caller without access learns nothing of the store's revisions.
// Then each attempt of the restore is checked against the key's state as
// the attempt's conditional write will find it (restoreCheck).
func (s *Server) serveRestore(w http.ResponseWriter, r *http.Request) {
	req, err := s.body(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	u := callerOf(ctx)
	o, isObject := s.keys.Parse(req.Key)
	var b history.Bounds
	if !isObject {
		err = s.authz.raw(ctx, "restore", req.Key)
	} else {
		a := Access{Verb: "get", Resource: o.Resource, Namespace: o.Namespace, Name: o.Name}
		if err = s.authz.check(ctx, a); err == nil {
			s.nsBounds(ctx, a, &b)
		}
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	resp, err := s.svc.RestoreChecked(ctx, req, b, func(ctx context.Context, cur, old *mvccpb.KeyValue) error {
		if !isObject {
			return nil // the raw-access groups may restore any key
		}
		return s.restoreCheck(ctx, req, o, cur, old)
	})
	var refused apierrors.APIStatus
	switch {
	case errors.As(err, &refused):
		writeStatus(w, err)
		return
	case err != nil:
		writeStatus(w, fromGRPC(err))
		return
	}
	s.log.Info("audit: restore", "user", u.GetName(), "groups", u.GetGroups(), "key", string(req.Key),
		"revision", resp.Revision, "unix_ms", req.UnixMs, "new_revision", resp.NewRevision)
	writeProto(w, resp)
}

// restoreCheck decides one attempt of a restore of the object o from its
// state now (cur, nil if absent) to old (nil: absent): the verb of the
// change as a SubjectAccessReview, the store's own rules, then what
// kube-apiserver would say of the write itself.
func (s *Server) restoreCheck(ctx context.Context, req *historypb.Request, o storagekey.Object, cur, old *mvccpb.KeyValue) error {
	if err := s.authz.write(ctx, req.Key, cur != nil, old != nil); err != nil {
		return err
	}
	if cur == nil && old == nil || cur != nil && old != nil && bytes.Equal(cur.Value, old.Value) {
		return nil // already as it was: nothing is written
	}
	raw := s.authz.inRawGroup(ctx)
	if !raw {
		if why := s.rawOnly(o, cur, old); why != "" {
			return s.refuse(ctx, o, why+fmt.Sprintf("; only the groups %v (--api-raw-access-groups) may restore it", s.cfg.RawAccessGroups))
		}
	}
	if s.cfg.RestoreCheck == RestoreCheckNone {
		return nil
	}
	writes, err := s.dryRunWrites(o, cur, old)
	var nao errNotAnObject
	switch {
	case errors.As(err, &nao) && raw:
		return nil // no dry run is possible; the raw-access groups may write it
	case errors.As(err, &nao):
		return s.refuse(ctx, o, fmt.Sprintf("a restore is checked by a dry run through kube-apiserver, and this one cannot be: %s; "+
			"only the groups %v (--api-raw-access-groups) may restore it", nao.why, s.cfg.RawAccessGroups))
	case err != nil:
		return apierrors.NewInternalError(err)
	}
	u := callerOf(ctx)
	for i, w := range writes {
		err := s.dryRun.DryRun(ctx, u, w)
		var st *apierrors.StatusError
		switch {
		case errors.As(err, &st) && i > 0 && (st.ErrStatus.Code == http.StatusNotFound || st.ErrStatus.Code == http.StatusMethodNotAllowed):
			// The resource has no status subresource: its field 3 is not
			// a status, and the main write's dry run judged it.
		case errors.As(err, &st):
			s.log.Warn("audit: denied", "user", u.GetName(), "groups", u.GetGroups(), "key", string(req.Key),
				"dry_run", w.String(), "code", st.ErrStatus.Code, "reason", st.ErrStatus.Message)
			return st
		case err != nil:
			s.log.Error("audit: could not check a restore", "user", u.GetName(), "key", string(req.Key), "dry_run", w.String(), "err", err)
			return unavailable("cannot check the restore with kube-apiserver: " + err.Error())
		}
	}
	return nil
}

// rawOnly says why a restore is for the raw-access groups only, or "":
// what no dry run can check.
//   - A restore to absence of a Namespace, or of an object with finalizers
//     (or one whose value cannot be read to tell): the key would go at
//     once, without the namespace's deletion or the finalizers running.
//   - A state whose deletion had begun (deletionTimestamp set): written
//     back, its finalizers' controllers delete it, a delete no review of
//     update or create sees; a dry run ignores the field.
//   - A CertificateSigningRequest: its approval is in its status, which
//     only the approval subresource may change.
//   - With RestoreCheckNone, sensitiveResource.
func (s *Server) rawOnly(o storagekey.Object, cur, old *mvccpb.KeyValue) string {
	if old == nil {
		if why := deletableByRestore(o, cur); why != "" {
			return why
		}
	} else if obj, err := decodeObject(old.Value); err == nil && obj.Meta.DeletionTimestamp != nil {
		return fmt.Sprintf("at that revision its deletion had begun (deletionTimestamp %s): written back, its finalizers would delete it; restore a revision from before", obj.Meta.DeletionTimestamp.UTC().Format(time.RFC3339))
	}
	if o.Group == "certificates.k8s.io" && o.Resource.Resource == "certificatesigningrequests" {
		return "a CertificateSigningRequest's approval is in its status, which only its approval subresource may change"
	}
	if s.cfg.RestoreCheck == RestoreCheckNone && sensitiveResource(o.Resource) {
		return fmt.Sprintf("restores of %s are checked by a dry run through kube-apiserver, and this store serves with --api-restore-check=none", o.Resource)
	}
	return ""
}

// dryRunWrites are the requests kube-apiserver would get for the change
// from cur to old: an update of the live object (its uid, at its
// resourceVersion) to the restored content (and of its status, where
// that changes), a create of a deleted object, or a delete with
// the live object's uid and resourceVersion as preconditions.
func (s *Server) dryRunWrites(o storagekey.Object, cur, old *mvccpb.KeyValue) ([]Write, error) {
	if old == nil {
		obj, err := decodeObject(cur.Value)
		if err != nil {
			return nil, err
		}
		path, err := objectPath(obj.APIVersion, o.Resource.Resource, o.Namespace, o.Name)
		if err != nil {
			return nil, errNotAnObject{err.Error()}
		}
		body, err := deleteBody(string(obj.Meta.UID), strconv.FormatInt(cur.ModRevision, 10))
		return []Write{{Method: http.MethodDelete, Path: path, Body: body, ContentType: jsonContentType}}, err
	}
	obj, err := decodeObject(old.Value)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		path, err := objectPath(obj.APIVersion, o.Resource.Resource, o.Namespace, "")
		if err != nil {
			return nil, errNotAnObject{err.Error()}
		}
		body, ct, err := obj.asCreate()
		return []Write{{Method: http.MethodPost, Path: path, Body: body, ContentType: ct}}, err
	}
	live, err := decodeObject(cur.Value)
	if err != nil {
		return nil, err
	}
	path, err := objectPath(obj.APIVersion, o.Resource.Resource, o.Namespace, o.Name)
	if err != nil {
		return nil, errNotAnObject{err.Error()}
	}
	// kube-apiserver judges the content against the live object, whose
	// identity the dry run keeps; the write brings back the restored
	// state's own uid, where it was another object's (ADR-006).
	body, ct, err := obj.asUpdate(live.Meta.UID, strconv.FormatInt(cur.ModRevision, 10))
	if err != nil {
		return nil, err
	}
	writes := []Write{{Method: http.MethodPut, Path: path, Body: body, ContentType: ct}}
	if !bytes.Equal(obj.status(), live.status()) {
		// An update through the object leaves its status as it is: a
		// restore that changes it is also a write of the status
		// subresource, which RBAC grants apart.
		writes = append(writes, Write{Method: http.MethodPut, Path: path + "/status", Body: body, ContentType: ct})
	}
	return writes, nil
}

// deletableByRestore says why a restore to absence would skip what a
// delete through kube-apiserver runs, or "": a Namespace's deletion
// (which empties it) and any object's finalizers. Such a key goes at
// once, and what the finalizers guard is left behind.
func deletableByRestore(o storagekey.Object, cur *mvccpb.KeyValue) string {
	if o.Group == "" && o.Resource.Resource == "namespaces" {
		return "a restore to absence would remove the Namespace without emptying it: " +
			"what it holds would wait for the next namespace of that name; delete it through kube-apiserver (kubectl delete namespace)"
	}
	obj, err := decodeObject(cur.Value)
	if err != nil {
		return "a restore to absence would remove it at once, and its value cannot be read to tell whether finalizers guard it (" + err.Error() + ")"
	}
	if f := obj.Meta.Finalizers; len(f) > 0 {
		return fmt.Sprintf("a restore to absence would remove it without running its finalizers %v: "+
			"delete it through kube-apiserver (kubectl delete), which runs them", f)
	}
	return ""
}

// refuse is a 403 for a restore that no SubjectAccessReview refused but
// the store's own rules do.
func (s *Server) refuse(ctx context.Context, o storagekey.Object, why string) error {
	u := callerOf(ctx)
	s.log.Warn("audit: denied", "user", u.GetName(), "groups", u.GetGroups(), "object", o.String(), "reason", why)
	return apierrors.NewForbidden(schema.GroupResource{Group: o.Group, Resource: o.Resource.Resource}, o.Name, errors.New(why))
}
