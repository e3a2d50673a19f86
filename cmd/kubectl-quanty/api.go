package main

// The History methods through kube-apiserver's aggregation layer
// (pkg/apiagg): reads as kubectl get --raw with the request in q, restores
// as kubectl create --raw with the request as the body.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const (
	apiBase     = "/apis/" + apiagg.Group + "/" + apiagg.Version
	apiService  = apiagg.Version + "." + apiagg.Group
	maxLogPages = 10000 // a bound on a runaway listing, far past any real one
)

type historyAPI struct{ k *kubectl }

func (h *historyAPI) read(ctx context.Context, resource string, req *historypb.Request, resp proto.Message) error {
	return h.readWith(ctx, resource, req, nil, resp)
}

// readWith is read with more query parameters than the request (the
// changes view's namespace, resource and exclude).
func (h *historyAPI) readWith(ctx context.Context, resource string, req *historypb.Request, params url.Values, resp proto.Message) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	query := "?q=" + base64.RawURLEncoding.EncodeToString(b)
	if len(params) > 0 {
		query += "&" + params.Encode()
	}
	out, err := h.k.getRaw(ctx, apiBase+"/"+resource+query)
	if err != nil {
		return explain(err)
	}
	if err := proto.Unmarshal(out, resp); err != nil {
		return fmt.Errorf("the answer of %s/%s is not a quantykube message (%d bytes): %w", apiBase, resource, len(out), err)
	}
	return nil
}

// log is every entry of the Log of req, read page by page.
func (h *historyAPI) log(ctx context.Context, req *historypb.Request) ([]*historypb.LogEntry, error) {
	req = proto.CloneOf(req)
	var all []*historypb.LogEntry
	for range maxLogPages {
		var resp historypb.LogResponse
		if err := h.read(ctx, "logs", req, &resp); err != nil {
			return nil, err
		}
		all = append(all, resp.Entries...)
		if resp.Continue == "" {
			return all, nil
		}
		req.Continue = resp.Continue
	}
	return nil, fmt.Errorf("the log of %q did not end after %d pages", req.Key, maxLogPages)
}

func (h *historyAPI) get(ctx context.Context, req *historypb.Request) (*historypb.GetResponse, error) {
	var resp historypb.GetResponse
	return &resp, h.read(ctx, "objects", req, &resp)
}

func (h *historyAPI) restore(ctx context.Context, req *historypb.Request) (*historypb.RestoreResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	out, err := h.k.createRaw(ctx, apiBase+"/restores", b)
	if err != nil {
		return nil, explain(err)
	}
	var resp historypb.RestoreResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("the answer of %s/restores is not a quantykube message (%d bytes): %w", apiBase, len(out), err)
	}
	return &resp, nil
}

// errForbidden marks a refusal, so that a listing over many resources can
// go on past the ones the caller may not read.
var errForbidden = errors.New("forbidden")

// errOutsideRetention marks a revision or time that QuantyKube no longer
// (or not yet) holds. A resource may be kept for less than others
// (--retain-prefix: leases by default), so that a listing over many
// resources meets it for some only.
var errOutsideRetention = errors.New("outside the history QuantyKube retains (its --retain window)")

// errConflict marks a restore refused because the object is no longer in
// the state the plugin showed (the request's if_mod_revision).
var errConflict = errors.New("conflict")

// forbiddenWhat reads kube-apiserver's wording of a refusal (which
// pkg/apiagg uses too): the verb, resource, group and namespace refused.
var forbiddenWhat = regexp.MustCompile(`cannot (\S+) resource "([^"]*)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?`)

// explain turns a failed kubectl into what a person needs to know: which
// permission is missing, that the API is not registered or not available,
// that a revision is outside the retention window.
func explain(err error) error {
	var ke *kubectlError
	if !errors.As(err, &ke) || ke.reason == "" {
		return err
	}
	msg := ke.message
	switch ke.reason {
	case "NotFound":
		return fmt.Errorf("kube-apiserver does not serve %s/%s: the APIService %s is not registered, so QuantyKube's history is not reachable through this cluster (%s)",
			apiagg.Group, apiagg.Version, apiService, msg)
	case "ServiceUnavailable":
		return fmt.Errorf("the APIService %s is not available: kube-apiserver cannot reach QuantyKube's aggregated API (kubectl get apiservice %s says why): %s",
			apiService, apiService, msg)
	case "Conflict":
		return fmt.Errorf("%w: %s", errConflict, strings.TrimPrefix(msg, "quantykube: "))
	case "Invalid":
		return errors.New(msg)
	case "Expired":
		return fmt.Errorf("%w, or in the future: %s", errOutsideRetention, strings.TrimPrefix(msg, "quantykube: "))
	case "Forbidden":
		m := forbiddenWhat.FindStringSubmatch(msg)
		if m == nil {
			return fmt.Errorf("%w: %s", errForbidden, msg)
		}
		verb, resource, group, ns := m[1], m[2], m[3], m[4]
		if group == apiagg.Group {
			return fmt.Errorf("%w: RBAC does not let you %s %s.%s: reading history needs a role with list on logs, objects and changes, restoring one with create on restores, in the API group %s (%s)",
				errForbidden, verb, resource, group, apiagg.Group, msg)
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
			errForbidden, verb, what, where, msg)
	}
	return fmt.Errorf("%s: %s", ke.reason, msg)
}
