package apiagg

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quantyroot/quantykube/pkg/apiagg/ui"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// uiPath is where the web page is served (pkg/apiagg/ui, ADR-047): under
// the group, so that kube-apiserver authenticates whoever opens it and
// RBAC decides (get and list on the resource "ui").
const uiPath = base + "/ui"

// serveUI answers GET and HEAD of the page and its assets, with the
// page's headers (CSP included) on every answer, errors too.
func serveUI(w http.ResponseWriter, r *http.Request) {
	ui.SetHeaders(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", http.MethodGet)
		writeStatus(w, methodNotAllowed(r.Method))
		return
	}
	if r.URL.Path == uiPath {
		// Relative, so that it holds behind any prefix (kubectl quanty
		// ui's proxy serves the API under a path of its own).
		w.Header().Set("Location", "ui/")
		w.WriteHeader(http.StatusMovedPermanently)
		return
	}
	if !ui.Serve(w, r, strings.TrimPrefix(r.URL.Path, uiPath+"/")) {
		writeStatus(w, notFound(r.URL.Path))
	}
}

// browserWriteCheck refuses a write a browser sent without the page's
// header. A browser names the Origin of every POST, and sends a header
// of the page's own only from a page of kube-apiserver's origin (another
// site's would need a CORS preflight kube-apiserver does not grant), so a
// form or script of another site that reaches kube-apiserver with the
// browser's ambient credentials (a client certificate, basic auth) writes
// nothing. kubectl sends no Origin and is not concerned.
func browserWriteCheck(r *http.Request) error {
	if r.Header.Get("Origin") == "" && r.Header.Get("Sec-Fetch-Site") == "" {
		return nil
	}
	if r.Header.Get(ui.Header) != "1" {
		return apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: "restores"}, "", errBrowserWrite)
	}
	return nil
}

var errBrowserWrite = browserWriteError{}

type browserWriteError struct{}

func (browserWriteError) Error() string {
	return "a restore sent by a browser must carry the header " + ui.Header + ": 1 (the web page sends it)"
}

// JSONType is the media type the web page asks for (ui.JSONType).
const JSONType = ui.JSONType

// wantsJSON is whether the caller asked for JSONType.
func wantsJSON(r *http.Request) bool {
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, params, err := mime.ParseMediaType(strings.TrimSpace(a)); err == nil && mt == "application/json" && params["as"] == "decoded" {
			return true
		}
	}
	return false
}

// jsonKV is a KeyValue as the JSON answers give it: the key as text and
// the value decoded, or why it is not; a server that does not decode
// (Config.DecodeValue nil) gives the value as stored (base64), and
// `kubectl quanty ui`'s proxy decodes it on its way to the page
// (ui.UndecodedProblem).
type jsonKV struct {
	Key            string          `json:"key"`
	CreateRevision int64           `json:"createRevision"`
	ModRevision    int64           `json:"modRevision"`
	Version        int64           `json:"version"`
	Object         json.RawMessage `json:"object,omitempty"`
	Value          []byte          `json:"value,omitempty"`
	Problem        string          `json:"problem,omitempty"`
	Size           int             `json:"size"`
}

type jsonEntry struct {
	Revision int64   `json:"revision"`
	UnixMs   int64   `json:"unixMs"`
	Deleted  int64   `json:"deleted,omitempty"`
	KV       *jsonKV `json:"kv,omitempty"`
	PrevKV   *jsonKV `json:"prevKv,omitempty"`
}

type jsonLog struct {
	Entries        []jsonEntry `json:"entries"`
	Continue       string      `json:"continue,omitempty"`
	HeaderRevision int64       `json:"headerRevision"`
}

type jsonGet struct {
	Revision int64     `json:"revision"`
	KV       *jsonKV   `json:"kv,omitempty"`
	KVs      []*jsonKV `json:"kvs,omitempty"`
	Continue string    `json:"continue,omitempty"`
}

type jsonRestore struct {
	Revision    int64   `json:"revision"`
	KV          *jsonKV `json:"kv,omitempty"`
	NewRevision int64   `json:"newRevision"`
}

func (s *Server) jsonKV(kv *mvccpb.KeyValue) *jsonKV {
	if kv == nil {
		return nil
	}
	j := &jsonKV{Key: string(kv.Key), CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Size: len(kv.Value)}
	switch {
	case len(kv.Value) == 0:
	case s.cfg.DecodeValue == nil:
		j.Value, j.Problem = kv.Value, ui.UndecodedProblem
	default:
		j.Object, j.Problem = s.cfg.DecodeValue(kv.Value)
	}
	return j
}

// writeAnswer writes a History answer in protobuf, or in JSON when the
// caller asked for JSONType.
func (s *Server) writeAnswer(w http.ResponseWriter, r *http.Request, m proto.Message) {
	if !wantsJSON(r) {
		writeProto(w, m)
		return
	}
	var v any
	switch m := m.(type) {
	case *historypb.LogResponse:
		l := jsonLog{Entries: make([]jsonEntry, 0, len(m.Entries)), Continue: m.Continue, HeaderRevision: m.HeaderRevision}
		for _, e := range m.Entries {
			l.Entries = append(l.Entries, jsonEntry{Revision: e.Revision, UnixMs: e.UnixMs, Deleted: e.Deleted, KV: s.jsonKV(e.Kv), PrevKV: s.jsonKV(e.PrevKv)})
		}
		v = l
	case *historypb.GetResponse:
		g := jsonGet{Revision: m.Revision, KV: s.jsonKV(m.Kv), Continue: m.Continue}
		for _, kv := range m.Kvs {
			g.KVs = append(g.KVs, s.jsonKV(kv))
		}
		v = g
	case *historypb.RestoreResponse:
		v = jsonRestore{Revision: m.Revision, KV: s.jsonKV(m.Kv), NewRevision: m.NewRevision}
	default:
		writeProto(w, m)
		return
	}
	writeJSONAs(w, http.StatusOK, JSONType, v)
}
