package apiagg

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The headers kube-apiserver's front proxy sets (its --requestheader-*
// defaults): it strips what the client sent and writes the caller's
// identity.
const (
	nameHeader   = "X-Remote-User"
	uidHeader    = "X-Remote-Uid"
	groupHeader  = "X-Remote-Group"
	extraPrefix  = "X-Remote-Extra-"
	extraPrefixL = "x-remote-extra-"
)

// healthPaths answer without authentication, as kube's own servers answer
// them (--authorization-always-allow-paths): a probe has no front-proxy
// certificate, and they reveal nothing.
var healthPaths = map[string]bool{"/healthz": true, "/readyz": true, "/livez": true}

// frontProxy authenticates kube-apiserver's front proxy as kube's own
// aggregated servers do: k8s.io/apiserver's x509 verifier checks the client
// certificate against the front-proxy CA, for client auth, with an allowed
// name, and only then are the X-Remote-* headers read (by remoteHeaders,
// which reads them exactly as k8s.io/apiserver's headerrequest package
// does; that package also holds a controller with a full Kubernetes
// clientset, which would double the binary: ADR-010).
type frontProxy struct {
	auth authenticator.Request
}

func newAuthenticator(clientCAFile string, allowedNames []string) (*frontProxy, error) {
	verify, err := x509request.NewStaticVerifierFromFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--api-client-ca: %w", err)
	}
	names := x509request.StaticStringSlice(allowedNames)
	return &frontProxy{auth: x509request.NewDynamicCAVerifier(verify, remoteHeaders{}, names)}, nil
}

// remoteHeaders reads the caller's identity from the front proxy's headers
// and removes them from the request.
type remoteHeaders struct{}

func (remoteHeaders) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	name := r.Header.Get(nameHeader)
	if name == "" {
		return nil, false, nil
	}
	u := &user.DefaultInfo{Name: name, UID: r.Header.Get(uidHeader), Groups: []string{}, Extra: map[string][]string{}}
	for _, g := range r.Header.Values(groupHeader) {
		if g != "" {
			u.Groups = append(u.Groups, g)
		}
	}
	for h, vv := range r.Header {
		if !strings.HasPrefix(strings.ToLower(h), extraPrefixL) {
			continue
		}
		// Extra keys are lower-cased and %-encoded in header names;
		// a malformed encoding is kept as it is.
		key := strings.ToLower(h[len(extraPrefix):])
		if k, err := url.PathUnescape(key); err == nil {
			key = k
		}
		u.Extra[key] = append(u.Extra[key], vv...)
	}
	clearIdentity(r.Header)
	return &authenticator.Response{User: u}, true, nil
}

// clearIdentity removes every identity header, so that nothing after
// authentication can mistake a client's own for the front proxy's.
func clearIdentity(h http.Header) {
	h.Del(nameHeader)
	h.Del(uidHeader)
	h.Del(groupHeader)
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), extraPrefixL) {
			delete(h, k)
		}
	}
}

type userKey struct{}

// callerOf is the authenticated caller of a request that passed wrap.
func callerOf(ctx context.Context) user.Info {
	u, _ := ctx.Value(userKey{}).(user.Info)
	return u
}

// wrap refuses every request that is not the front proxy's before any
// handler runs, but for the health checks.
func (p *frontProxy) wrap(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if healthPaths[r.URL.Path] {
			clearIdentity(r.Header)
			next.ServeHTTP(w, r)
			return
		}
		resp, ok, err := p.auth.AuthenticateRequest(r)
		if err != nil || !ok {
			why := "no front-proxy client certificate, or no X-Remote-User"
			if err != nil {
				why = err.Error()
			}
			log.Warn("audit: refused an unauthenticated request", "remote", r.RemoteAddr, "path", r.URL.Path, "reason", why)
			writeStatus(w, unauthorized("only kube-apiserver's front proxy may call this API (a client certificate from --api-client-ca with an allowed name, and X-Remote-User)"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, resp.User)))
	})
}
