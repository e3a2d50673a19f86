package apiagg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/transport"
)

// Write is one change as a request to kube-apiserver: a create (POST on
// the collection), an update (PUT on the object) or a delete (DELETE on
// the object, with preconditions in the body).
type Write struct {
	Method      string
	Path        string // e.g. /api/v1/namespaces/ns/configmaps/name
	Body        []byte
	ContentType string
}

func (w Write) String() string { return w.Method + " " + w.Path }

// DryRunner asks kube-apiserver whether it would accept a write from a
// user: the write with dryRun=All, as that user. It returns nil when
// kube-apiserver accepts it, kube-apiserver's own answer as an
// *apierrors.StatusError when it refuses it, and any other error when it
// could not ask.
type DryRunner interface {
	DryRun(ctx context.Context, u user.Info, w Write) error
}

// apiDryRunner impersonates the caller (user, uid, groups and extra, as
// the front proxy named them) with the store's own credentials, which
// therefore need the impersonate verb (deploy/aggregated-api/rbac.yaml).
type apiDryRunner struct{ *apiClient }

// maxStatusBytes bounds the answer read back from kube-apiserver: a
// Status is small; an accepted dry run's object is not read at all.
const maxStatusBytes = 1 << 20

func (d *apiDryRunner) DryRun(ctx context.Context, u user.Info, w Write) error {
	req, err := http.NewRequestWithContext(ctx, w.Method, d.host+w.Path+"?dryRun=All", bytes.NewReader(w.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", w.ContentType)
	req.Header.Set("Accept", jsonContentType)
	req.Header.Set("User-Agent", "quantykube-aggregated-api")
	rt := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{
		UserName: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra(),
	}, d.rt)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("dry run %s: %w", w, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	var st metav1.Status
	if json.Unmarshal(b, &st) != nil || st.Kind != "Status" {
		return fmt.Errorf("dry run %s: kube-apiserver answered %s", w, resp.Status)
	}
	if st.Code == http.StatusForbidden && strings.Contains(st.Message, "cannot impersonate") {
		// The store's own identity was refused, not the caller.
		return fmt.Errorf("dry run %s: the store may not impersonate the caller (apply the RBAC `quantykube apiservice` prints, or serve with --api-restore-check=none): %s", w, st.Message)
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// objectPath is the REST path of an object of apiVersion (name empty: of
// its collection), as kube-apiserver serves it.
func objectPath(apiVersion, resource, namespace, name string) (string, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gv.Version == "" {
		return "", fmt.Errorf("apiVersion %q is not group/version", apiVersion)
	}
	p := "/api/" + gv.Version
	if gv.Group != "" {
		p = "/apis/" + gv.Group + "/" + gv.Version
	}
	if namespace != "" {
		p += "/namespaces/" + url.PathEscape(namespace)
	}
	p += "/" + resource
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p, nil
}

// deleteBody is DeleteOptions for a dry run that deletes only the object
// as it is now: the uid and resourceVersion a restore to absence was
// decided on. The body says dryRun itself: kube-apiserver reads a
// DELETE's options from its body when it has one, and the query's
// ?dryRun=All is then ignored, so without it the object would really go.
func deleteBody(uid, resourceVersion string) ([]byte, error) {
	opts := metav1.DeleteOptions{
		TypeMeta:      metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"},
		Preconditions: &metav1.Preconditions{ResourceVersion: &resourceVersion},
		DryRun:        []string{metav1.DryRunAll},
	}
	if uid != "" {
		id := types.UID(uid)
		opts.Preconditions.UID = &id
	}
	b, err := json.Marshal(opts)
	if err != nil {
		return nil, errors.New("encoding DeleteOptions: " + err.Error())
	}
	return b, nil
}
