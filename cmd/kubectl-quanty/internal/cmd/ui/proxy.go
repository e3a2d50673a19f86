package ui

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// Group is the API group the proxy forwards: the page (served by the
// aggregated API under it) and every request it makes are under
// /apis/quanty.quantyroot.io/. Nothing else of the cluster is forwarded,
// so that a page that learns the URL does not get a proxy to the whole
// cluster with the user's credentials.
const Group = "/apis/quanty.quantyroot.io/"

// Header is the header every request but a GET or HEAD must carry, set by
// the page's own scripts: a form another site posts cannot set it, and a
// script of another origin cannot send it without a CORS preflight, which
// the proxy never approves.
const Header = "X-Quanty-UI"

// forwarded are the request headers that reach kube-apiserver; every
// other one (Cookie, Authorization, Impersonate-*, Referer, which holds
// the token, Origin) stays behind: the credentials and the identity are
// the kubeconfig's alone.
var forwarded = []string{"Accept", "Accept-Encoding", "Accept-Language", "Content-Type", "Cache-Control", "If-None-Match", "If-Modified-Since"}

// Proxy serves /s/TOKEN/REST as kube-apiserver's /REST, for REST under
// Group, to requests addressed to the proxy's own loopback Host and, with
// an Origin, from its own origin.
type Proxy struct {
	token string
	hosts map[string]bool
	rp    *httputil.ReverseProxy
	log   io.Writer
}

// NewProxy forwards to the server at target (its path a prefix, as a
// kubeconfig's server URL may carry) through transport, which carries the
// kubeconfig's credentials. port is the port the proxy listens on: the
// Hosts it answers to are 127.0.0.1, [::1] and localhost on it, and
// listenHost (a loopback IP) on it. Errors reaching the server are
// written to log, without the token.
func NewProxy(token string, target *url.URL, transport http.RoundTripper, listenHost, port string, log io.Writer) *Proxy {
	p := &Proxy{token: token, hosts: map[string]bool{}, log: log}
	for _, h := range []string{"127.0.0.1", "::1", "localhost", listenHost} {
		p.hosts[net.JoinHostPort(h, port)] = true
	}
	p.rp = &httputil.ReverseProxy{
		Transport: transport,
		// A watch (the timeline's live changes) streams: each event is
		// passed on as it comes.
		FlushInterval: -1,
		Rewrite: func(r *httputil.ProxyRequest) {
			rest := r.In.Context().Value(restKey{}).(string)
			out := *target
			out.Path = strings.TrimSuffix(target.Path, "/") + rest
			out.RawPath = ""
			out.RawQuery = r.In.URL.RawQuery
			r.Out.URL = &out
			r.Out.Host = ""
			r.Out.Header = http.Header{}
			for _, h := range forwarded {
				if v := r.In.Header.Values(h); len(v) > 0 {
					r.Out.Header[h] = v
				}
			}
			if wantsDecoded(r.In.Header) {
				// The proxy reads the answer to decode its values: the
				// transport asks for, and inflates, its own compression.
				r.Out.Header.Del("Accept-Encoding")
			}
			r.Out.Header.Set("User-Agent", "kubectl-quanty-ui")
		},
		ModifyResponse: func(resp *http.Response) error {
			// kube-apiserver's challenge would make the browser ask for a
			// password the proxy would drop; nothing upstream sets a
			// cookie for the proxy's origin either.
			resp.Header.Del("WWW-Authenticate")
			resp.Header.Del("Set-Cookie")
			if wantsDecoded(resp.Request.Header) {
				return decodeAnswer(resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			fmt.Fprintf(p.log, "kubectl quanty ui: %s %s: %v\n", r.Method, r.Context().Value(restKey{}), err)
			var ae *answerError
			if errors.As(err, &ae) {
				http.Error(w, "kubectl quanty ui: cannot decode kube-apiserver's answer: "+err.Error(), http.StatusBadGateway)
				return
			}
			http.Error(w, "kubectl quanty ui: cannot reach kube-apiserver: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p
}

// restKey holds, in a request's context, the path to forward.
type restKey struct{}

func contextWith(r *http.Request, rest string) context.Context {
	return context.WithValue(r.Context(), restKey{}, rest)
}

// ServeHTTP checks a request and forwards it. The checks, in order: the
// Host (a page of another site whose name resolves to 127.0.0.1, DNS
// rebinding, sends its own name), the token (404 without it, as for any
// path that is not the proxy's), the Origin (another tab's site), the
// header on a request that changes something, and the path.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The token is in the URL: no page the proxy serves sends it on to
	// another site, nor is framed by one.
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !p.hosts[strings.ToLower(r.Host)] {
		http.Error(w, "kubectl quanty ui: refused: the Host is not this proxy's (127.0.0.1, [::1] or localhost on its port)", http.StatusForbidden)
		return
	}
	rest, ok := p.strip(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		http.Error(w, "kubectl quanty ui: refused: a request from another origin", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get(Header) != "1" {
		http.Error(w, "kubectl quanty ui: refused: a "+r.Method+" without the header "+Header+": 1", http.StatusForbidden)
		return
	}
	if r.Header.Get("Upgrade") != "" {
		http.Error(w, "kubectl quanty ui: refused: protocol upgrades are not forwarded", http.StatusForbidden)
		return
	}
	if !strings.HasPrefix(rest, Group) || !clean(rest) {
		http.Error(w, "kubectl quanty ui: refused: only paths under "+Group+" are forwarded", http.StatusForbidden)
		return
	}
	p.rp.ServeHTTP(w, r.WithContext(contextWith(r, rest)))
}

// strip is the path after /s/TOKEN, if it begins so; compared in constant
// time.
func (p *Proxy) strip(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/s/")
	if !ok {
		return "", false
	}
	tok, rest, _ := strings.Cut(rest, "/")
	if subtle.ConstantTimeCompare([]byte(tok), []byte(p.token)) != 1 {
		return "", false
	}
	return "/" + rest, true
}

// clean says a decoded path has no empty, "." or ".." segment (but a
// final empty one, the trailing slash), so that it stays under Group
// whatever kube-apiserver makes of it.
func clean(path string) bool {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, s := range segs {
		if s == "." || s == ".." || s == "" && i != len(segs)-1 {
			return false
		}
	}
	return true
}
