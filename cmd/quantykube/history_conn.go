package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/proto/historypb"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// How the history subcommands reach a server: the endpoint and TLS flags,
// the dial with its probe, and errors explained in terms of those flags.

// connFlags are the flags of every subcommand that say how to reach the
// server; the TLS flags are named as those of `quantykube serve`.
type connFlags struct {
	endpoints                        []string
	certFile, keyFile, trustedCAFile string
	insecureSkipVerify               bool
	dialTimeout, commandTimeout      time.Duration
	output                           string
	outputs                          []string
}

func (c *connFlags) register(fs *pflag.FlagSet, outputs ...string) {
	fs.StringSliceVar(&c.endpoints, "endpoints", []string{"127.0.0.1:2379"}, "server address(es): host:port, http://host:port, https://host:port or unix:///path; tried in order")
	fs.StringVar(&c.certFile, "cert-file", "", "client TLS certificate (default: none)")
	fs.StringVar(&c.keyFile, "key-file", "", "client TLS key, with --cert-file (default: none)")
	fs.StringVar(&c.trustedCAFile, "trusted-ca-file", "", "CA that signs the server's certificate (default: the system's)")
	fs.BoolVar(&c.insecureSkipVerify, "insecure-skip-tls-verify", false, "do not verify the server's certificate")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 2*time.Second, "how long to wait for a connection")
	fs.DurationVar(&c.commandTimeout, "command-timeout", 5*time.Second, "how long one request may take")
	c.outputs = append([]string{"table", "json"}, outputs...)
	fs.StringVarP(&c.output, "output", "o", "table", "output format: "+strings.Join(c.outputs, ", "))
}

func (c *connFlags) check() error {
	if !slices.Contains(c.outputs, c.output) {
		return fmt.Errorf("--output %q: want one of %s", c.output, strings.Join(c.outputs, ", "))
	}
	if len(c.endpoints) == 0 {
		return errors.New("--endpoints: no endpoint")
	}
	if c.dialTimeout <= 0 || c.commandTimeout <= 0 {
		return errors.New("--dial-timeout and --command-timeout must be positive")
	}
	if (c.certFile == "") != (c.keyFile == "") {
		return errors.New("--cert-file and --key-file go together")
	}
	return nil
}

func (c *connFlags) wantTLS() bool {
	return c.certFile != "" || c.trustedCAFile != "" || c.insecureSkipVerify
}

// target is one endpoint as gRPC dials it.
type target struct {
	endpoint string // as given
	dial     string // the gRPC target
	tls      bool
	server   string // the name to verify with TLS
}

// parseEndpoint reads host:port, http://host:port, https://host:port or
// unix:///path (unix://path and unix:path too).
func parseEndpoint(ep string, wantTLS bool) (target, error) {
	t := target{endpoint: ep, tls: wantTLS}
	switch {
	case strings.HasPrefix(ep, "unix:"):
		path := strings.TrimPrefix(strings.TrimPrefix(ep, "unix:"), "//")
		if path == "" {
			return t, fmt.Errorf("endpoint %q: no socket path", ep)
		}
		t.dial, t.server = "unix://"+path, "localhost"
		if !strings.HasPrefix(path, "/") {
			t.dial = "unix:" + path
		}
		return t, nil
	case strings.Contains(ep, "://"):
		u, err := url.Parse(ep)
		if err != nil {
			return t, fmt.Errorf("endpoint %q: %v", ep, err)
		}
		switch u.Scheme {
		case "http":
			if wantTLS {
				return t, fmt.Errorf("endpoint %q is plaintext but TLS flags were given; use https://", ep)
			}
		case "https":
			t.tls = true
		default:
			return t, fmt.Errorf("endpoint %q: unknown scheme %q (want http, https or unix)", ep, u.Scheme)
		}
		if u.Host == "" || (u.Path != "" && u.Path != "/") {
			return t, fmt.Errorf("endpoint %q: want %s://host:port", ep, u.Scheme)
		}
		t.dial, t.server = "passthrough:///"+u.Host, u.Hostname()
		return t, nil
	default:
		if ep == "" || strings.Contains(ep, "/") {
			return t, fmt.Errorf("endpoint %q: want host:port, http://host:port, https://host:port or unix:///path", ep)
		}
		t.dial = "passthrough:///" + ep
		if i := strings.LastIndexByte(ep, ':'); i >= 0 {
			t.server = strings.Trim(ep[:i], "[]")
		} else {
			t.server = ep
		}
		return t, nil
	}
}

func (c *connFlags) tlsConfig(serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: c.insecureSkipVerify}
	if c.certFile != "" {
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if c.trustedCAFile != "" {
		pem, err := os.ReadFile(c.trustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("--trusted-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--trusted-ca-file %s: no certificates found", c.trustedCAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// maxRecvBytes: a Log page stops short of 3 MiB, but one change of a
// large value carries it twice (kv and prev_kv).
const maxRecvBytes = 64 << 20

// historyConn is a connection to the first endpoint that answered.
type historyConn struct {
	conn     *grpc.ClientConn
	client   historypb.HistoryClient
	endpoint string
	timeout  time.Duration
}

// connect dials the endpoints in order and keeps the first that answers
// within --dial-timeout.
func (c *connFlags) connect(ctx context.Context) (*historyConn, error) {
	var errs []error
	for _, ep := range c.endpoints {
		t, err := parseEndpoint(strings.TrimSpace(ep), c.wantTLS())
		if err != nil {
			return nil, err
		}
		creds := insecure.NewCredentials()
		if t.tls {
			tc, err := c.tlsConfig(t.server)
			if err != nil {
				return nil, err
			}
			creds = credentials.NewTLS(tc)
		}
		conn, err := grpc.NewClient(t.dial,
			grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)))
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %v", t.endpoint, err)
		}
		if err := probe(ctx, conn, c.dialTimeout); err != nil {
			conn.Close()
			errs = append(errs, fmt.Errorf("cannot connect to %s: %v", t.endpoint, err))
			continue
		}
		return &historyConn{conn: conn, client: historypb.NewHistoryClient(conn), endpoint: t.endpoint, timeout: c.commandTimeout}, nil
	}
	return nil, errors.Join(errs...)
}

// probe waits until the server answers any RPC (the health service's, which
// the server may not even serve) or the connection fails.
func probe(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		return errors.New(dialReason(st.Message()))
	case codes.DeadlineExceeded:
		if ctx.Err() != nil {
			return fmt.Errorf("no connection within --dial-timeout %v", timeout)
		}
	case codes.Canceled:
		return err
	}
	return nil
}

// dialReason shortens gRPC's connection error text to its cause, e.g.
// "connection refused".
func dialReason(msg string) string {
	for _, known := range []string{"connection refused", "no such file or directory", "connection reset by peer", "no route to host", "certificate"} {
		if strings.Contains(msg, known) {
			if known == "certificate" {
				return "TLS: " + msg
			}
			return known
		}
	}
	return msg
}

func (h *historyConn) Close() error { return h.conn.Close() }

// call runs one request with --command-timeout.
func call[T any](ctx context.Context, h *historyConn, fn func(context.Context, *historypb.Request, ...grpc.CallOption) (T, error), req *historypb.Request) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	resp, err := fn(ctx, req)
	if err != nil {
		return resp, h.explain(err)
	}
	return resp, nil
}

// explain turns an RPC error into a message for people: the server's own
// text for OUT_OF_RANGE and invalid arguments, the endpoint for
// connection failures.
func (h *historyConn) explain(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	// The server names itself; main prefixes every error with the name.
	msg := strings.TrimPrefix(st.Message(), "quantykube: ")
	switch st.Code() {
	case codes.OutOfRange, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.Aborted:
		return errors.New(msg)
	case codes.Unimplemented:
		return fmt.Errorf("%s does not serve quantykube.History (an etcd, or a quantykube without history?): %s", h.endpoint, msg)
	case codes.Unavailable:
		return fmt.Errorf("%s unavailable: %s", h.endpoint, dialReason(msg))
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: no answer within --command-timeout %v", h.endpoint, h.timeout)
	default:
		return fmt.Errorf("%s: %s: %s", h.endpoint, st.Code(), msg)
	}
}
