package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/quantyroot/quantykube/pkg/tls"
)

// ETCDConfig is how an etcd client reaches what Listen started, as kine
// returns it: the endpoints, the CA that verifies the server (TLSConfig's
// CAFile), and whether several servers may share the database, so that
// the caller should elect leaders among its controllers (LeaderElect: true
// on PostgreSQL and for an external etcd).
type ETCDConfig struct {
	Endpoints   []string
	TLSConfig   tls.Config
	LeaderElect bool
}

// Listen starts serving cfg.Endpoint's database on cfg.Listener, as kine's
// endpoint.Listen does, and returns once it accepts connections. The
// server stops when ctx ends: it stops accepting, lets in-flight requests
// finish for at most cfg.ShutdownTimeout, closes the database, and then
// releases cfg.WaitGroup. An etcd URL as the endpoint is returned as it is,
// with BackendTLSConfig, and nothing is served.
func Listen(ctx context.Context, cfg Config) (ETCDConfig, error) {
	if etcdURL(cfg.Endpoint) {
		return ETCDConfig{
			Endpoints:   strings.Split(cfg.Endpoint, ","),
			TLSConfig:   cfg.BackendTLSConfig,
			LeaderElect: true,
		}, nil
	}
	s, err := Start(ctx, cfg)
	if err != nil {
		// The endpoint may hold credentials: say only which one failed.
		which := "default endpoint"
		if cfg.Endpoint != "" {
			which = "configured endpoint"
		}
		return ETCDConfig{}, fmt.Errorf("quantykube on the %s: %w", which, err)
	}
	if cfg.WaitGroup != nil {
		cfg.WaitGroup.Add(1)
	}
	go func() {
		<-ctx.Done()
		if err := s.Close(); err != nil {
			s.cfg.Logger.Warn("closing the database", "err", err)
		}
		if cfg.WaitGroup != nil {
			cfg.WaitGroup.Done()
		}
	}()
	return s.ETCDConfig(), nil
}

// etcdURL reports whether an endpoint names an etcd server rather than a
// database (kine's "remote" schemes).
func etcdURL(endpoint string) bool {
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return false
	}
	switch scheme {
	case "http", "https", "unix", "unixs":
		return true
	}
	return false
}

// listen binds a Listener string and returns the URL clients dial.
func listen(ctx context.Context, listener string, secure bool) (net.Listener, string, error) {
	scheme, addr, ok := strings.Cut(listener, "://")
	if !ok {
		scheme, addr = "tcp", listener
	}
	var lc net.ListenConfig
	if scheme == "unix" {
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, "", fmt.Errorf("listen %s: %w", listener, err)
		}
		l, err := lc.Listen(ctx, "unix", addr)
		if err != nil {
			return nil, "", fmt.Errorf("listen %s: %w", listener, err)
		}
		// Only this user may connect: the socket is the whole datastore.
		if err := os.Chmod(addr, 0o600); err != nil {
			l.Close()
			return nil, "", fmt.Errorf("listen %s: %w", listener, err)
		}
		if secure {
			return l, "unixs://" + addr, nil
		}
		return l, "unix://" + addr, nil
	}
	switch scheme {
	case "tcp", "http", "https":
	default:
		return nil, "", fmt.Errorf("listen %s: unknown scheme %q (want host:port, tcp://, http:// or unix://)", listener, scheme)
	}
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen %s: %w", listener, err)
	}
	host, port, _ := net.SplitHostPort(l.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	prefix := "http://"
	if secure {
		prefix = "https://"
	}
	return l, prefix + net.JoinHostPort(host, port), nil
}
