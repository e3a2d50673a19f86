package apiagg

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const base = "/apis/" + Group + "/" + Version

// protobufType is the Content-Type of answers: the History service's
// messages, as kubectl get --raw copies them.
const protobufType = "application/vnd.google.protobuf"

// routes serves what authentication let through.
func (s *Server) routes() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		type route struct {
			method string
			serve  func(http.ResponseWriter, *http.Request)
		}
		var rt route
		if r.URL.Path == uiPath || strings.HasPrefix(r.URL.Path, uiPath+"/") {
			serveUI(w, r)
			return
		}
		switch r.URL.Path {
		case "/healthz", "/readyz", "/livez":
			rt = route{http.MethodGet, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				_, _ = io.WriteString(w, "ok")
			}}
		case "/apis":
			rt = route{http.MethodGet, serveAPIs}
		case "/apis/" + Group:
			rt = route{http.MethodGet, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, apiGroup()) }}
		case base:
			rt = route{http.MethodGet, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, apiResourceList()) }}
		case base + "/logs":
			rt = route{http.MethodGet, s.serveLog}
		case base + "/objects":
			rt = route{http.MethodGet, s.serveGet}
		case base + "/changes":
			rt = route{http.MethodGet, s.serveChanges}
		case base + "/restores":
			rt = route{http.MethodPost, s.serveRestore}
		default:
			// OpenAPI included: none is served.
			writeStatus(w, notFound(r.URL.Path))
			return
		}
		if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", rt.method)
			writeStatus(w, methodNotAllowed(r.Method))
			return
		}
		rt.serve(w, r)
	})
}

// query decodes a read's request: the q parameter, the Request message
// base64url-encoded (with or without padding).
func (s *Server) query(r *http.Request) (*historypb.Request, error) {
	qs := r.URL.Query()["q"]
	if len(qs) != 1 || qs[0] == "" {
		return nil, badRequest("give the request as one q parameter: a base64url-encoded quantykube.Request")
	}
	if len(qs[0]) > base64.RawURLEncoding.EncodedLen(s.cfg.MaxRequestBytes)+2 {
		return nil, tooLarge(fmt.Sprintf("the request is over %d bytes", s.cfg.MaxRequestBytes))
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(qs[0], "="))
	if err != nil {
		return nil, badRequest("q is not base64url: " + err.Error())
	}
	return decodeRequest(b)
}

// body decodes a write's request: the Request message as the body, with
// any Content-Type or none (kubectl create --raw -f sends none).
func (s *Server) body(w http.ResponseWriter, r *http.Request) (*historypb.Request, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxRequestBytes)))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge(fmt.Sprintf("the request is over %d bytes", s.cfg.MaxRequestBytes))
	}
	if err != nil {
		return nil, badRequest("reading the request: " + err.Error())
	}
	return decodeRequest(b)
}

func decodeRequest(b []byte) (*historypb.Request, error) {
	req := &historypb.Request{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, badRequest("the request is not a quantykube.Request: " + err.Error())
	}
	if len(req.Key) == 0 {
		return nil, badRequest("key is required")
	}
	return req, nil
}

func (s *Server) serveLog(w http.ResponseWriter, r *http.Request) {
	s.read(w, r, "logs", func(ctx context.Context, req *historypb.Request, b history.Bounds) (proto.Message, error) {
		return s.svc.LogWithin(ctx, req, b)
	})
}

func (s *Server) serveGet(w http.ResponseWriter, r *http.Request) {
	s.read(w, r, "objects", func(ctx context.Context, req *historypb.Request, b history.Bounds) (proto.Message, error) {
		return s.svc.GetWithin(ctx, req, b)
	})
}

// read answers a Log or Get once the caller may read what it names,
// within what it may read of it: its continue tokens bound to the caller,
// and the history of its namespace's earlier incarnations left out
// (nsBounds).
func (s *Server) read(w http.ResponseWriter, r *http.Request, endpoint string, call func(context.Context, *historypb.Request, history.Bounds) (proto.Message, error)) {
	req, err := s.query(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	a, err := s.authz.read(ctx, req.Key, req.RangeEnd)
	if err != nil {
		writeStatus(w, err)
		return
	}
	b := history.Bounds{Scope: scopeOf(callerOf(ctx), endpoint)}
	s.nsBounds(ctx, a, &b)
	resp, err := call(ctx, req, b)
	if err != nil {
		writeStatus(w, asStatus(err))
		return
	}
	s.writeAnswer(w, r, resp)
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		writeStatus(w, err)
		return
	}
	w.Header().Set("Content-Type", protobufType)
	_, _ = w.Write(b)
}
