// Package api is QuantyKube's History as kube-apiserver serves it through
// its aggregation layer (pkg/apiagg): reads as GETs with the request in q,
// restores as POSTs with the request as the body, over a client.Interface.
// Continue tokens are opaque: each is handed back as it was received.
package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/client"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// The API's group and version, as pkg/apiagg serves them (a test holds
// them equal). They are written out rather than imported: importing
// pkg/apiagg would link kube-apiserver's authentication packages into the
// plugin for two strings.
const (
	Group   = "quanty.quantyroot.io"
	Version = "v1alpha1"

	// Base is the API's path.
	Base = "/apis/" + Group + "/" + Version
	// APIService is the name of the APIService that registers it.
	APIService = Version + "." + Group

	// MaxPages bounds a listing read page by page: far past any real one,
	// it ends a runaway.
	MaxPages = 10000
)

// History reads and restores through a client.
type History struct{ c client.Interface }

// New is the History API through c.
func New(c client.Interface) *History { return &History{c: c} }

// Read reads resource (logs, objects, changes) for req, with more query
// parameters than the request (the changes view's namespace, resource and
// exclude), into resp.
func (h *History) Read(ctx context.Context, resource string, req *historypb.Request, params url.Values, resp proto.Message) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	query := "?q=" + base64.RawURLEncoding.EncodeToString(b)
	if len(params) > 0 {
		query += "&" + params.Encode()
	}
	out, err := h.c.Get(ctx, Base+"/"+resource+query)
	if err != nil {
		return Explain(err)
	}
	if err := proto.Unmarshal(out, resp); err != nil {
		return fmt.Errorf("the answer of %s/%s is not a quantykube message (%d bytes): %w", Base, resource, len(out), err)
	}
	return nil
}

// Log is every entry of the Log of req, read page by page.
func (h *History) Log(ctx context.Context, req *historypb.Request) ([]*historypb.LogEntry, error) {
	all, more, err := h.LogPages(ctx, req, MaxPages)
	if err == nil && more {
		err = fmt.Errorf("the log of %q did not end after %d pages", req.Key, MaxPages)
	}
	return all, err
}

// LogPages is the entries of the first pages (at most) of the Log of req,
// and whether there are more.
func (h *History) LogPages(ctx context.Context, req *historypb.Request, pages int) ([]*historypb.LogEntry, bool, error) {
	req = proto.CloneOf(req)
	var all []*historypb.LogEntry
	for range pages {
		var resp historypb.LogResponse
		if err := h.Read(ctx, "logs", req, nil, &resp); err != nil {
			return nil, false, err
		}
		all = append(all, resp.Entries...)
		if resp.Continue == "" {
			return all, false, nil
		}
		req.Continue = resp.Continue
	}
	return all, true, nil
}

// Get is one Get: a key, or one page of a range.
func (h *History) Get(ctx context.Context, req *historypb.Request) (*historypb.GetResponse, error) {
	var resp historypb.GetResponse
	return &resp, h.Read(ctx, "objects", req, nil, &resp)
}

// State is the key of req as it was: the revision read, and its value
// then (nil when it did not exist).
func (h *History) State(ctx context.Context, req *historypb.Request) (int64, *mvccpb.KeyValue, error) {
	resp, err := h.Get(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	return resp.GetRevision(), resp.GetKv(), nil
}

// Range reads every key of req's range as it was, page by page: the
// revision read (the first page's, which later pages keep) and the keys.
func (h *History) Range(ctx context.Context, req *historypb.Request) (int64, []*mvccpb.KeyValue, error) {
	req = proto.CloneOf(req)
	var all []*mvccpb.KeyValue
	var rev int64
	for range MaxPages {
		resp, err := h.Get(ctx, req)
		if err != nil {
			return 0, nil, err
		}
		if rev == 0 {
			rev = resp.GetRevision()
		}
		all = append(all, resp.GetKvs()...)
		if resp.GetContinue() == "" {
			return rev, all, nil
		}
		req.Continue = resp.GetContinue()
	}
	return 0, nil, fmt.Errorf("the listing of %q did not end after %d pages", req.Key, MaxPages)
}

// Restore writes req's key back as it was (pkg/apiagg's restores).
func (h *History) Restore(ctx context.Context, req *historypb.Request) (*historypb.RestoreResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	out, err := h.c.Post(ctx, Base+"/restores", b)
	if err != nil {
		return nil, Explain(err)
	}
	var resp historypb.RestoreResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("the answer of %s/restores is not a quantykube message (%d bytes): %w", Base, len(out), err)
	}
	return &resp, nil
}
