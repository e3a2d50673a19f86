// Package apiagg serves quantykube.History as the Kubernetes aggregated API
// quanty.quantyroot.io/v1alpha1, which kube-apiserver authenticates,
// authorizes and forwards to (docs/HISTORY.md, ADR-010):
//
//	GET  /apis/quanty.quantyroot.io/v1alpha1/logs?q=<base64url Request>     Log
//	GET  /apis/quanty.quantyroot.io/v1alpha1/objects?q=<base64url Request>  Get
//	GET  /apis/quanty.quantyroot.io/v1alpha1/changes?q=<base64url Request>[&namespace=NS][&resource=R...][&exclude=R...]
//	                                                   Log, of what the caller may list (changes.go)
//	POST /apis/quanty.quantyroot.io/v1alpha1/restores  (the Request as body) Restore
//
// Requests and answers are the History service's protobuf messages, with
// its semantics: the handlers call pkg/history. Errors are Kubernetes
// Status objects.
//
// Only kube-apiserver's front proxy may call: a client certificate from
// the front-proxy CA, with an allowed name, carries the caller's identity
// in X-Remote-* headers (authn.go). kube-apiserver's RBAC check on this
// group is coarse, and history holds every old value of every Secret, so
// each request is also authorized against the object it reads or writes,
// as the caller, with a SubjectAccessReview (authz.go).
package apiagg

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

const (
	// Group and Version of the API.
	Group   = "quanty.quantyroot.io"
	Version = "v1alpha1"
	// DefaultAllowedName is kube-apiserver's usual front-proxy client name.
	DefaultAllowedName = "front-proxy-client"
	// DefaultRawAccessGroup may read and restore keys that hold no
	// Kubernetes object.
	DefaultRawAccessGroup = "system:masters"
	// DefaultMaxRequestBytes bounds a request (the q parameter or the
	// body): a History request is a key and a few numbers.
	DefaultMaxRequestBytes = 64 << 10
	// requestTimeout keeps every answer well inside kube-apiserver's 60 s
	// timeout for proxied requests.
	requestTimeout = 45 * time.Second
)

// timeouts bound each connection, so that no client holds one open: the
// headers and the body (at most MaxRequestBytes) come within seconds; an
// answer takes at most requestTimeout, and its writing is allowed a
// margin past it; an idle connection (kube-apiserver keeps them for
// reuse) closes after a while.
type timeouts struct {
	readHeader, read, write, idle time.Duration
}

var defaultTimeouts = timeouts{
	readHeader: 10 * time.Second,
	read:       30 * time.Second,
	write:      requestTimeout + 15*time.Second,
	idle:       90 * time.Second,
}

// Config configures the aggregated API server.
type Config struct {
	// Listen is host:port to serve on.
	Listen string
	// CertFile and KeyFile are the serving certificate, for the name
	// kube-apiserver dials: <service>.<namespace>.svc.
	CertFile, KeyFile string
	// ClientCAFile is kube-apiserver's front-proxy CA
	// (--requestheader-client-ca-file).
	ClientCAFile string
	// AllowedNames are the client certificate names accepted as the front
	// proxy (--requestheader-allowed-names): nil is DefaultAllowedName, an
	// empty list any name the CA signed.
	AllowedNames []string
	// RawAccessGroups may read and restore keys that hold no Kubernetes
	// object (nil: DefaultRawAccessGroup).
	RawAccessGroups []string
	// Kubeconfig is where the credentials for SubjectAccessReviews come
	// from; empty: the pod's service account, when running in one.
	Kubeconfig string
	// InsecureSkipObjectAuthorization serves history to anyone the front
	// proxy lets through, without asking kube-apiserver whether they may
	// see the object: only kube-apiserver's coarse check on this API group
	// remains.
	InsecureSkipObjectAuthorization bool
	// RestoreCheck is how a restore is checked beyond the
	// SubjectAccessReviews: RestoreCheckDryRun (the default) or
	// RestoreCheckNone.
	RestoreCheck string
	// EtcdPrefix is kube-apiserver's --etcd-prefix (default /registry).
	EtcdPrefix string
	// MaxRequestBytes bounds a request (default DefaultMaxRequestBytes).
	MaxRequestBytes int
	// DecodeValue turns a stored value into its object's JSON, or says
	// why it cannot, for answers in JSON (the web page's); nil: values
	// are sent as they are stored, for `kubectl quanty ui` to decode
	// (uidecode.Decode links every built-in API type, which costs a
	// server 23 MB of binary and 13 MB of memory: ADR-047).
	DecodeValue func([]byte) (json.RawMessage, string)
	Logger      *slog.Logger
	// Reviewer decides access instead of SubjectAccessReviews, DryRunner
	// answers restores' dry runs and Cluster the store's own questions
	// instead of kube-apiserver (tests).
	Reviewer  Reviewer
	DryRunner DryRunner
	Cluster   Cluster
}

// Server is the aggregated API on its listener.
type Server struct {
	cfg     Config
	log     *slog.Logger
	svc     *history.Service
	keys    *storagekey.Table
	authz   *authorizer
	dryRun  DryRunner
	cluster Cluster // nil: the store has no credentials for kube-apiserver
	limits  timeouts
	http    *http.Server
	lis     net.Listener
	handler http.Handler
}

// New checks cfg, fills in its defaults and builds the server for the
// History service svc; Serve starts it.
func New(cfg Config, svc *history.Service) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AllowedNames == nil {
		cfg.AllowedNames = []string{DefaultAllowedName}
	}
	if cfg.RawAccessGroups == nil {
		cfg.RawAccessGroups = []string{DefaultRawAccessGroup}
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.CertFile == "" || cfg.KeyFile == "" || cfg.ClientCAFile == "" {
		return nil, errors.New("the aggregated API needs --api-cert, --api-key and --api-client-ca (kube-apiserver's front-proxy CA)")
	}
	authn, err := newAuthenticator(cfg.ClientCAFile, cfg.AllowedNames)
	if err != nil {
		return nil, err
	}
	switch cfg.RestoreCheck {
	case "":
		cfg.RestoreCheck = RestoreCheckDryRun
	case RestoreCheckDryRun, RestoreCheckNone:
	default:
		return nil, fmt.Errorf("--api-restore-check %q: want %s or %s", cfg.RestoreCheck, RestoreCheckDryRun, RestoreCheckNone)
	}
	rev, dry, cl := cfg.Reviewer, cfg.DryRunner, cfg.Cluster
	needReviewer := rev == nil && !cfg.InsecureSkipObjectAuthorization
	needDryRunner := dry == nil && cfg.RestoreCheck == RestoreCheckDryRun
	rc, err := restConfig(cfg.Kubeconfig)
	switch {
	case err != nil && (needReviewer || needDryRunner):
		return nil, err
	case err == nil:
		if needReviewer {
			if rev, err = newSARReviewer(rc); err != nil {
				return nil, err
			}
		}
		api, err := newAPIClient(rc)
		if err != nil {
			return nil, err
		}
		if needDryRunner {
			dry = &apiDryRunner{api}
		}
		if cl == nil {
			cl = newAPICluster(api)
		}
	}
	s := &Server{cfg: cfg, log: cfg.Logger, svc: svc, keys: storagekey.New(cfg.EtcdPrefix), dryRun: dry, cluster: cl, limits: defaultTimeouts}
	s.authz = &authorizer{reviewer: rev, rawGroups: cfg.RawAccessGroups, keys: s.keys, log: cfg.Logger}
	s.handler = authn.wrap(s.routes(), s.log)
	return s, nil
}

// Handler is the whole API behind authentication, for tests that serve it
// themselves.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve binds the listener and starts serving it in the background: it
// returns once the listener is bound (or could not be). Close stops it.
func (s *Server) Serve() error {
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("--api-cert/--api-key: %w", err)
	}
	pem, err := os.ReadFile(s.cfg.ClientCAFile)
	if err != nil {
		return fmt.Errorf("--api-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--api-client-ca %s holds no PEM certificate", s.cfg.ClientCAFile)
	}
	tc := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// A certificate from another CA fails the handshake. None is let
		// through to the health checks only (authn.go): probes have none.
		ClientCAs:  pool,
		ClientAuth: tls.VerifyClientCertIfGiven,
	}
	l, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("--api-listen: %w", err)
	}
	s.lis = l
	s.http = &http.Server{
		Handler:           s.handler,
		TLSConfig:         tc,
		ReadHeaderTimeout: s.limits.readHeader,
		ReadTimeout:       s.limits.read,
		WriteTimeout:      s.limits.write,
		IdleTimeout:       s.limits.idle,
		// Past our own limit on q, so that a long one is answered with a
		// Status (413), not net/http's bare 431.
		MaxHeaderBytes: 2*s.cfg.MaxRequestBytes + 16<<10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := s.http.Serve(tls.NewListener(l, tc)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("aggregated API stopped", "err", err)
		}
	}()
	s.log.Info("serving the aggregated API", "listen", "https://"+l.Addr().String(), "group", Group+"/"+Version,
		"object_authorization", !s.cfg.InsecureSkipObjectAuthorization, "restore_check", s.cfg.RestoreCheck)
	if s.cfg.InsecureSkipObjectAuthorization {
		s.log.Warn("object authorization is off: any caller kube-apiserver lets through reads the history of every object, Secrets included")
	}
	return nil
}

// Addr is the bound address (after Serve).
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Close stops serving, letting requests in flight finish for a while.
func (s *Server) Close(ctx context.Context) error {
	if s.http == nil {
		return nil
	}
	return s.http.Shutdown(ctx)
}
