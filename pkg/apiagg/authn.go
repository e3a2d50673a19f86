package apiagg

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The headers kube-apiserver's front proxy sets (its --requestheader-*
// defaults): it strips what the client sent and writes the caller's
// identity.
var (
	nameHeaders  = headerrequest.StaticStringSlice{"X-Remote-User"}
	uidHeaders   = headerrequest.StaticStringSlice{"X-Remote-Uid"}
	groupHeaders = headerrequest.StaticStringSlice{"X-Remote-Group"}
	extraPrefix  = headerrequest.StaticStringSlice{"X-Remote-Extra-"}
)

// healthPaths answer without authentication, as kube's own servers answer
// them (--authorization-always-allow-paths): a probe has no front-proxy
// certificate, and they reveal nothing.
var healthPaths = map[string]bool{"/healthz": true, "/readyz": true, "/livez": true}

// frontProxy authenticates kube-apiserver's front proxy with the request
// header authenticator kube's own aggregated servers use: a client
// certificate that verifies against the front-proxy CA for client auth,
// with an allowed name, and only then the X-Remote-* headers.
type frontProxy struct {
	auth authenticator.Request
}

func newAuthenticator(clientCAFile string, allowedNames []string) (*frontProxy, error) {
	verify, err := x509request.NewStaticVerifierFromFile(clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--api-client-ca: %w", err)
	}
	auth := headerrequest.NewDynamicVerifyOptionsSecure(verify, headerrequest.StaticStringSlice(allowedNames),
		nameHeaders, uidHeaders, groupHeaders, extraPrefix)
	return &frontProxy{auth: auth}, nil
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
			// Never trust identity headers on an unauthenticated request.
			headerrequest.ClearAuthenticationHeaders(r.Header, nameHeaders, uidHeaders, groupHeaders, extraPrefix)
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
