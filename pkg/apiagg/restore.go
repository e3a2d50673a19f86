package apiagg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
	if err := browserWriteCheck(r); err != nil {
		writeStatus(w, err)
		return
	}
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
	run := &restoreRun{}
	if run.dryRun, err = dryRunParam(r); err != nil {
		writeStatus(w, err)
		return
	}
	resp, err := s.svc.RestoreChecked(ctx, req, b, func(ctx context.Context, cur, old *mvccpb.KeyValue) (*history.RestoreWrite, error) {
		if !isObject {
			if run.dryRun {
				run.preview(old, nil)
				return nil, errPreviewed
			}
			return nil, nil // the raw-access groups may restore any key
		}
		return s.restoreCheck(ctx, run, req, o, cur, old)
	})
	if err != nil || resp.NewRevision == 0 {
		s.release(ctx, o, run.held)
	}
	if run.withoutStatus != "" && (resp != nil && resp.NewRevision != 0 || errors.Is(err, errPreviewed)) {
		// kubectl prints a Warning header as kube-apiserver's own warnings.
		w.Header().Add("Warning", `299 - "`+strings.ReplaceAll(run.withoutStatus, `"`, `'`)+`"`)
	}
	var refused apierrors.APIStatus
	switch {
	case errors.Is(err, errPreviewed):
		s.log.Info("audit: restore dry run", "user", u.GetName(), "groups", u.GetGroups(), "key", string(req.Key), "revision", req.Revision, "unix_ms", req.UnixMs)
		s.writeAnswer(w, r, &historypb.RestoreResponse{Revision: req.Revision, Kv: run.written})
		return
	case errors.As(err, &refused):
		writeStatus(w, err)
		return
	case err != nil:
		writeStatus(w, fromGRPC(err))
		return
	}
	s.log.Info("audit: restore", "user", u.GetName(), "groups", u.GetGroups(), "key", string(req.Key),
		"revision", resp.Revision, "unix_ms", req.UnixMs, "new_revision", resp.NewRevision, "without_status", run.withoutStatus != "")
	s.writeAnswer(w, r, resp)
}

// restoreRun is what one restore's attempts leave for its answer.
type restoreRun struct {
	held          []string // ClusterIPs held for it, to release if it is not written
	withoutStatus string   // why the status was not written as it was, if it was not
	dryRun        bool     // check everything, write nothing, answer what would be written
	written       *mvccpb.KeyValue
}

// errPreviewed ends a dry run's restore once every check has passed,
// before anything is written.
var errPreviewed = errors.New("restore previewed: nothing written")

// preview keeps what the restore would write: old's value, or the value
// the checks shaped from it (the live status kept); nil for absence.
func (run *restoreRun) preview(old *mvccpb.KeyValue, w *history.RestoreWrite) {
	if old == nil {
		return
	}
	run.written = &mvccpb.KeyValue{Key: old.Key, Value: old.Value}
	if w != nil && w.Value != nil {
		run.written.Value = w.Value
	}
}

// dryRunParam reads dryRun=All, as kube-apiserver names a dry run: the
// restore is checked as it would be written (the SubjectAccessReviews,
// the store's own rules, kube-apiserver's dry run as the caller) and
// answered with what it would write, and nothing is written.
func dryRunParam(r *http.Request) (bool, error) {
	v, ok := r.URL.Query()["dryRun"]
	if !ok {
		return false, nil
	}
	if len(v) != 1 || v[0] != "All" {
		return false, badRequest("dryRun must be All (a restore checked and not written), or absent")
	}
	return true, nil
}

// restoreCheck decides one attempt of a restore of the object o from its
// state now (cur, nil if absent) to old (nil: absent), and how it is
// written: the verb of the change as a SubjectAccessReview, the store's
// own rules, the status the caller may write, what kube-apiserver would
// say of the write itself, and, for a Service brought back, what
// kube-apiserver must hold for it.
func (s *Server) restoreCheck(ctx context.Context, run *restoreRun, req *historypb.Request, o storagekey.Object, cur, old *mvccpb.KeyValue) (*history.RestoreWrite, error) {
	if err := s.authz.write(ctx, req.Key, cur != nil, old != nil); err != nil {
		return nil, err
	}
	if cur == nil && old == nil || cur != nil && old != nil && bytes.Equal(cur.Value, old.Value) {
		return nil, nil // already as it was: nothing is written
	}
	raw := s.authz.inRawGroup(ctx)
	if !raw {
		if why := s.rawOnly(o, cur, old); why != "" {
			return nil, s.refuse(ctx, o, why+fmt.Sprintf("; only the groups %v (--api-raw-access-groups) may restore it", s.cfg.RawAccessGroups))
		}
	}
	w := &history.RestoreWrite{}
	statusWritten := false
	if old != nil {
		var err error
		if w.Value, statusWritten, run.withoutStatus, err = s.statusPlan(ctx, o, cur, old); err != nil {
			return nil, err
		}
	}
	if s.cfg.RestoreCheck != RestoreCheckNone {
		if err := s.dryRunChecks(ctx, req, o, cur, old, raw, statusWritten); err != nil {
			return nil, err
		}
	}
	if run.dryRun {
		// Everything is checked; what a write would do to kube-apiserver's
		// allocations (holdFor) is a write of its own, not made.
		run.preview(old, w)
		return nil, errPreviewed
	}
	if cur == nil && old != nil && o.Group == "" && o.Resource.Resource == "services" {
		if err := s.holdFor(ctx, run, o, old, w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// dryRunChecks asks kube-apiserver, as the caller, for dry runs of the
// writes the restore makes (dryRunWrites).
func (s *Server) dryRunChecks(ctx context.Context, req *historypb.Request, o storagekey.Object, cur, old *mvccpb.KeyValue, raw, statusWritten bool) error {
	writes, err := s.dryRunWrites(o, cur, old, statusWritten)
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

// statusPlan decides the status a restore writes. kube-apiserver's own
// create drops a status and its update keeps the live one: a status is
// written only through the status subresource, which RBAC grants apart.
// A restore writes the old state's status when it is the live one's
// (none, on a re-create), when the resource has no status subresource
// (the field is then not a status: the dry run of the main write judges
// it), or when the caller may update the status subresource; otherwise
// it writes the old state with the live status (none on a re-create), as
// kube-apiserver would, and says so (why). written reports whether the
// write changes the status. With no credentials for kube-apiserver, there
// is no telling, and the state is written as it was.
func (s *Server) statusPlan(ctx context.Context, o storagekey.Object, cur, old *mvccpb.KeyValue) (value []byte, written bool, why string, err error) {
	obj, err := decodeObject(old.Value)
	if err != nil {
		return nil, true, "", nil // no dry run either: the raw-access groups' alone
	}
	var live []byte
	if cur != nil {
		l, err := decodeObject(cur.Value)
		if err != nil {
			return nil, true, "", nil
		}
		live = l.status()
	}
	st := obj.status()
	if bytes.Equal(st, live) || s.cluster == nil {
		return nil, !bytes.Equal(st, live), "", nil
	}
	has, err := s.cluster.HasStatus(ctx, obj.APIVersion, o.Resource.Resource)
	if err != nil {
		return nil, false, "", unavailable("cannot tell whether " + o.Resource.String() + " has a status subresource: " + err.Error())
	}
	if !has {
		return nil, false, "", nil
	}
	a := Access{Verb: "update", Resource: o.Resource, Subresource: "status", Namespace: o.Namespace, Name: o.Name}
	ok, err := s.authz.may(ctx, a)
	switch {
	case err != nil:
		return nil, false, "", err
	case ok:
		return nil, true, "", nil
	}
	if value, err = obj.withStatus(live); err != nil {
		return nil, false, "", s.refuse(ctx, o, "the restore would write its status, which the caller may not ("+a.String()+"), and it cannot be written without: "+err.Error())
	}
	why = fmt.Sprintf("restored without its status as it was: writing a status needs %s; the status is %s", a, map[bool]string{true: "left as it is", false: "left empty, for its controllers to fill"}[cur != nil])
	u := callerOf(ctx)
	s.log.Info("audit: restore without status", "user", u.GetName(), "object", o.String(), "reason", why)
	return value, false, why, nil
}

// holdFor makes kube-apiserver hold what a Service brought back holds
// (holdAllocations), refusing the restore when another object holds it
// now.
func (s *Server) holdFor(ctx context.Context, run *restoreRun, o storagekey.Object, old *mvccpb.KeyValue, w *history.RestoreWrite) error {
	obj, err := decodeObject(old.Value)
	if err != nil {
		return s.refuse(ctx, o, "a Service brought back must have its ClusterIPs and NodePorts held by kube-apiserver, and its value cannot be read: "+err.Error())
	}
	held, err := s.holdAllocations(ctx, o.Namespace, o.Name, obj, w)
	run.held = append(run.held, held...)
	var ipe *IPHeldError
	var pt errPortTaken
	var nao errNotAnObject
	switch {
	case errors.As(err, &ipe), errors.As(err, &pt):
		return apierrors.NewConflict(schema.GroupResource{Resource: "services"}, o.Name, fmt.Errorf("the Service cannot come back as it was: %w; restore it with another ClusterIP or NodePort through kube-apiserver (kubectl create)", err))
	case errors.As(err, &nao):
		return s.refuse(ctx, o, "a Service brought back must have its ClusterIPs and NodePorts held by kube-apiserver, and this one's cannot be: "+nao.why)
	case err != nil:
		return unavailable("cannot hold the Service's ClusterIPs with kube-apiserver: " + err.Error())
	}
	return nil
}

// release gives back the ClusterIPs held for a restore that was not
// written; kube-apiserver's repair loop would remove them in time too.
func (s *Server) release(ctx context.Context, o storagekey.Object, ips []string) {
	for _, ip := range ips {
		if err := s.cluster.ReleaseIP(context.WithoutCancel(ctx), ip, o.Namespace, o.Name); err != nil {
			s.log.Warn("could not release a ClusterIP held for a restore that was not written", "ip", ip, "service", o.String(), "err", err)
		}
	}
}

// rawOnly says why a restore is for the raw-access groups only, or "":
// what no dry run can check.
//   - A restore to absence of a Namespace, or of an object with finalizers
//     (or one whose value cannot be read to tell): the key would go at
//     once, without the namespace's deletion or the finalizers running.
//   - A state whose deletion had begun (deletionTimestamp set): written
//     back, its finalizers' controllers delete it, a delete no review of
//     update or create sees; a dry run ignores the field.
//   - A restore over an object whose deletion is in progress that would
//     clear or change its deletionTimestamp: it would cancel the deletion
//     half-way through its finalizers, and kube-apiserver copies the live
//     deletionTimestamp into every update, so no dry run sees it.
//   - A CertificateSigningRequest: its approval is in its status, which
//     only the approval subresource may change.
//   - With RestoreCheckNone, sensitiveResource.
func (s *Server) rawOnly(o storagekey.Object, cur, old *mvccpb.KeyValue) string {
	if why := cancelsDeletion(cur, old); why != "" {
		return why
	}
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

// cancelsDeletion says why a restore over cur, an object being deleted,
// would cancel or change that deletion, or "".
func cancelsDeletion(cur, old *mvccpb.KeyValue) string {
	if cur == nil || old == nil {
		return "" // a restore to absence: deletableByRestore's
	}
	live, err := decodeObject(cur.Value)
	if err != nil || live.Meta.DeletionTimestamp == nil {
		return ""
	}
	if back, err := decodeObject(old.Value); err == nil && back.Meta.DeletionTimestamp.Equal(live.Meta.DeletionTimestamp) {
		return ""
	}
	return fmt.Sprintf("its deletion is in progress (deletionTimestamp %s, finalizers %v), and the restore would cancel it half-way through its finalizers; "+
		"let the deletion finish, then restore", live.Meta.DeletionTimestamp.UTC().Format(time.RFC3339), live.Meta.Finalizers)
}

// dryRunWrites are the requests kube-apiserver would get for the change
// from cur to old: an update of the live object (its uid, at its
// resourceVersion) to the restored content (and of its status, where the
// restore writes it: statusWritten), a create of a deleted object, or a
// delete with the live object's uid and resourceVersion as preconditions.
func (s *Server) dryRunWrites(o storagekey.Object, cur, old *mvccpb.KeyValue, statusWritten bool) ([]Write, error) {
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
	if statusWritten {
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
