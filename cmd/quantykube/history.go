package main

// `quantykube history`: a client of the quantykube.History service that a
// server runs on the same socket as its etcd API.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/pkg/timearg"
	"github.com/quantyroot/quantykube/proto/historypb"
)

const historyUsage = `quantykube history: the retained history of keys (quantykube.History)

Usage:
  quantykube history log KEY [--prefix | --range-end E] [--rev N | --since TIME] [--limit N]
      every retained change to KEY (or to a prefix or range), oldest first
  quantykube history get KEY (--rev N | --at TIME)
      KEY as it was at revision N or at TIME
  quantykube history restore KEY (--rev N | --at TIME)
      write KEY back as it was: its old value (without a lease), or a
      delete if it did not exist then, as a new revision

TIME is RFC 3339 (2024-05-01T12:00:00Z, 2024-05-01T14:00:00.250+02:00), a
local date-time (2024-05-01 14:00:00), "now", or relative to now: -15m,
-2h, -1h30m, -2d.

Output: -o table (default) or -o json: protojson of the response with the
spec's field names (for log, one LogResponse holding every entry read);
get also takes -o value (the raw value bytes).

Run 'quantykube history COMMAND --help' for the flags.
`

// history runs `quantykube history ...`.
func history(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, historyUsage)
		return errors.New("history: missing command (log, get or restore)")
	}
	h := &historyCmd{stdout: os.Stdout, stderr: os.Stderr, now: time.Now, loc: time.Local}
	switch args[0] {
	case "log":
		return h.log(args[1:])
	case "get":
		return h.get(args[1:])
	case "restore":
		return h.restore(args[1:])
	case "help", "-h", "--help":
		fmt.Fprint(h.stdout, historyUsage)
		return nil
	default:
		fmt.Fprint(os.Stderr, historyUsage)
		return fmt.Errorf("history: unknown command %q", args[0])
	}
}

// historyCmd carries what the subcommands print to and read the clock
// from.
type historyCmd struct {
	stdout, stderr io.Writer
	now            func() time.Time
	loc            *time.Location
}

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

// pointFlags are --rev and --at of get and restore.
type pointFlags struct {
	rev int64
	at  string
}

func (p *pointFlags) register(fs *pflag.FlagSet) {
	fs.Int64Var(&p.rev, "rev", 0, "the revision to read (default: none; give --rev or --at)")
	fs.StringVar(&p.at, "at", "", "the time to read: RFC 3339 or relative (-15m) (default: none; give --rev or --at)")
}

// apply sets the revision or time of req; exactly one is required unless
// optional.
func (p *pointFlags) apply(fs *pflag.FlagSet, req *historypb.Request, now time.Time, optional bool) error {
	revSet, atSet := fs.Changed("rev"), fs.Changed("at")
	switch {
	case revSet && atSet:
		return errors.New("--rev and --at exclude each other")
	case revSet:
		if p.rev <= 0 {
			return fmt.Errorf("--rev %d: want a revision > 0", p.rev)
		}
		req.Revision = p.rev
	case atSet:
		ms, err := timearg.ParseUnixMs(p.at, now)
		if err != nil {
			return fmt.Errorf("--at: %w", err)
		}
		req.UnixMs = ms
	case !optional:
		return errors.New("want --rev N or --at TIME")
	}
	return nil
}

// parseArgs parses a subcommand's flags and its single KEY argument. It
// returns done when --help was asked for.
func parseArgs(fs *pflag.FlagSet, args []string, conn *connFlags) (key []byte, done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, true, nil
		}
		return nil, false, err
	}
	if fs.NArg() != 1 {
		return nil, false, fmt.Errorf("want exactly one KEY, got %d arguments\n\nUsage: %s", fs.NArg(), fs.Name())
	}
	if err := conn.check(); err != nil {
		return nil, false, err
	}
	return []byte(fs.Arg(0)), false, nil
}

func newFlagSet(usage string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(usage, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: %s\n\nFlags:\n%s", usage, fs.FlagUsages())
	}
	return fs
}

// prefixEnd is the range end of every key that starts with prefix, as
// etcd computes it; "\x00" (every key) when no such end exists.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// maxPage is the largest page the server gives.
const maxPage = 10000

func (h *historyCmd) log(args []string) error {
	fs := newFlagSet("quantykube history log KEY [--prefix | --range-end E] [--rev N | --since TIME] [--limit N]")
	var conn connFlags
	var prefix bool
	var rangeEnd, since, cont string
	var rev, limit int64
	fs.BoolVar(&prefix, "prefix", false, "every key that starts with KEY")
	fs.StringVar(&rangeEnd, "range-end", "", "every key in [KEY, E); \"\\x00\" as E: every key >= KEY (default: none, KEY alone)")
	fs.Int64Var(&rev, "rev", 0, "list changes from this revision on (default: none, from the oldest retained)")
	fs.StringVar(&since, "since", "", "list changes from this time on: RFC 3339 or relative (-15m) (default: none, from the oldest retained)")
	fs.Int64Var(&limit, "limit", 0, "list at most N changes (default: all, read in pages)")
	fs.StringVar(&cont, "continue", "", "resume a listing cut by --limit: the token it printed (default: none, from the start)")
	conn.register(fs)
	key, done, err := parseArgs(fs, args, &conn)
	if done || err != nil {
		return err
	}
	req := &historypb.Request{Key: key, Continue: cont}
	switch {
	case prefix && fs.Changed("range-end"):
		return errors.New("--prefix and --range-end exclude each other")
	case prefix:
		if len(key) == 0 {
			req.Key = []byte{0}
		}
		req.RangeEnd = prefixEnd(key)
	case fs.Changed("range-end"):
		if rangeEnd == "" {
			return errors.New("--range-end: empty")
		}
		req.RangeEnd = []byte(rangeEnd)
		if rangeEnd == `\x00` {
			req.RangeEnd = []byte{0}
		}
	}
	switch {
	case fs.Changed("rev") && fs.Changed("since"):
		return errors.New("--rev and --since exclude each other")
	case fs.Changed("rev"):
		if rev <= 0 {
			return fmt.Errorf("--rev %d: want a revision > 0", rev)
		}
		req.Revision = rev
	case fs.Changed("since"):
		ms, err := timearg.ParseUnixMs(since, h.now())
		if err != nil {
			return fmt.Errorf("--since: %w", err)
		}
		req.UnixMs = ms
	}
	if fs.Changed("limit") && limit <= 0 {
		return fmt.Errorf("--limit %d: want a count > 0", limit)
	}

	ctx := context.Background()
	hc, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer hc.Close()
	all, err := readLog(ctx, hc, req, limit)
	if err != nil {
		return err
	}
	if conn.output == "json" {
		return writeJSON(h.stdout, all)
	}
	if err := writeLogTable(h.stdout, all.GetEntries(), h.loc); err != nil {
		return err
	}
	if all.GetContinue() != "" {
		fmt.Fprintf(h.stderr, "more changes follow: add --continue %s\n", all.GetContinue())
	}
	return nil
}

// maxPages bounds the pages one listing reads: at the server's page size
// of 1000 that is 10 million changes.
const maxPages = 10000

// readLog reads pages until the log ends or limit (if > 0) entries are
// read, and returns them as one LogResponse; its continue token is set
// when the listing stopped at the limit, its header revision is that of
// the first page.
func readLog(ctx context.Context, hc *historyConn, req *historypb.Request, limit int64) (*historypb.LogResponse, error) {
	all := &historypb.LogResponse{}
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("log: more than %d pages; narrow it with --rev, --since or --limit", maxPages)
		}
		if limit > 0 {
			req.Limit = min(limit-int64(len(all.Entries)), maxPage)
		}
		resp, err := call(ctx, hc, hc.client.Log, req)
		if err != nil {
			return nil, err
		}
		if page == 0 {
			all.HeaderRevision = resp.GetHeaderRevision()
		}
		all.Entries = append(all.Entries, resp.GetEntries()...)
		all.Continue = resp.GetContinue()
		if all.Continue == "" || (limit > 0 && int64(len(all.Entries)) >= limit) {
			return all, nil
		}
		if len(resp.GetEntries()) == 0 && all.Continue == req.Continue {
			return nil, errors.New("log: the server returned an empty page with the same continue token")
		}
		req.Continue = all.Continue
	}
}

// pointSetup parses the flags of a subcommand that reads one key at one
// revision or time (get, restore) and connects, so that both take the same
// flags and fail the same way. A nil connection with a nil error means
// --help was shown.
func (h *historyCmd) pointSetup(usage string, args []string, optional bool, outputs ...string) (*historypb.Request, string, *historyConn, error) {
	fs := newFlagSet(usage)
	var conn connFlags
	var point pointFlags
	point.register(fs)
	conn.register(fs, outputs...)
	key, done, err := parseArgs(fs, args, &conn)
	if done || err != nil {
		return nil, "", nil, err
	}
	req := &historypb.Request{Key: key}
	if err := point.apply(fs, req, h.now(), optional); err != nil {
		return nil, "", nil, err
	}
	hc, err := conn.connect(context.Background())
	if err != nil {
		return nil, "", nil, err
	}
	return req, conn.output, hc, nil
}

func (h *historyCmd) get(args []string) error {
	req, output, hc, err := h.pointSetup("quantykube history get KEY (--rev N | --at TIME)", args, true, "value")
	if err != nil || hc == nil {
		return err
	}
	defer hc.Close()
	resp, err := call(context.Background(), hc, hc.client.Get, req)
	if err != nil {
		return err
	}
	switch output {
	case "json":
		return writeJSON(h.stdout, resp)
	case "value":
		if resp.GetKv() == nil {
			return fmt.Errorf("%s did not exist at revision %d", displayKey(req.Key), resp.GetRevision())
		}
		_, err := h.stdout.Write(resp.GetKv().GetValue())
		return err
	}
	return writeGetTable(h.stdout, req.Key, resp)
}

func (h *historyCmd) restore(args []string) error {
	req, output, hc, err := h.pointSetup("quantykube history restore KEY (--rev N | --at TIME)", args, false)
	if err != nil || hc == nil {
		return err
	}
	defer hc.Close()
	resp, err := call(context.Background(), hc, hc.client.Restore, req)
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(h.stdout, resp)
	}
	return writeRestoreTable(h.stdout, req.Key, resp)
}
