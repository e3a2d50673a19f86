package apiagg

import (
	"encoding/json"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Errors are Kubernetes Status objects with the code a Kubernetes client
// expects, built with apimachinery's constructors.

func unauthorized(msg string) error { return apierrors.NewUnauthorized(msg) }
func badRequest(msg string) error   { return apierrors.NewBadRequest(msg) }
func unavailable(msg string) error  { return apierrors.NewServiceUnavailable(msg) }
func tooLarge(msg string) error     { return apierrors.NewRequestEntityTooLargeError(msg) }
func notFound(path string) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: Group}, path)
}
func methodNotAllowed(m string) error {
	return apierrors.NewMethodNotSupported(schema.GroupResource{Group: Group}, m)
}

// fromGRPC maps the History service's answer to its Kubernetes meaning:
// a revision outside the retention window is a resourceVersion too old
// (410 Expired), as kube-apiserver answers one past its compaction.
func fromGRPC(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return apierrors.NewInternalError(err)
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return badRequest(st.Message())
	case codes.OutOfRange:
		return apierrors.NewResourceExpired(st.Message())
	case codes.Aborted:
		return apierrors.NewConflict(schema.GroupResource{Group: Group, Resource: "restores"}, "", errors.New(st.Message()))
	case codes.Unavailable, codes.Canceled:
		return unavailable(st.Message())
	case codes.DeadlineExceeded:
		return apierrors.NewTimeoutError(st.Message(), 1)
	}
	return apierrors.NewInternalError(errors.New(st.Message()))
}

// asStatus is err as the API answers it: a Status the request's own
// checks made, or the History service's answer (fromGRPC).
func asStatus(err error) error {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return err
	}
	return fromGRPC(err)
}

// writeStatus writes err as a Status (any error that is not one is a 500).
func writeStatus(w http.ResponseWriter, err error) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	st.Status = metav1.StatusFailure
	writeJSON(w, int(st.Code), &st)
}

// notAcceptable is 406 for an Accept header that allows nothing served here.
func notAcceptable(accept string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable,
		Message: "only application/json and the aggregated discovery document are served, not " + accept,
	}}
}

func writeJSON(w http.ResponseWriter, code int, v any) { writeJSONAs(w, code, "application/json", v) }

func writeJSONAs(w http.ResponseWriter, code int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
