// Package ui is kubectl quanty ui: the history's web page, which the
// aggregated API serves, opened in a browser through a proxy on this
// machine that holds the user's kubeconfig, as kubectl proxy does, but
// for one session (a token in the URL), for QuantyKube's API group only,
// and for the proxy's own page only (Host and Origin checked).
package ui

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
)

// Page is the page's path under the proxy's prefix.
const Page = Group + "v1alpha1/ui/"

// RESTConfigAnnotation marks a command that reads kubectl's flags into a
// client-go configuration of its own instead of passing them on to
// kubectl (its help says so).
const RESTConfigAnnotation = "kubectl-quanty/rest-config"

const (
	short = "Open the history's web page in a browser, as you"
	long  = `Serves QuantyKube's web page of the history (a timeline of changes, each
object's revisions, diffs and blame, deleted objects, restores) on this
machine, and opens it in a browser. The page is the aggregated API's
(` + Page + `): each request goes through kube-apiserver
with your kubeconfig's credentials, as kubectl's would (client
certificates, tokens, exec plugins, --as), so it shows what you may see and
restores what you may change.

The proxy listens on 127.0.0.1 (--address, a loopback address only) on a
random port (--port), and answers only under a path that holds a token
made for this session: the URL it prints. Anyone who has the URL acts as
you until it stops: do not share it. It forwards only QuantyKube's API
group, answers only requests addressed to itself by a loopback name (no
other site's name resolved to 127.0.0.1), refuses a request another
site's page sends, and a request that changes something unless the page's
own header is on it. It drops the browser's cookies and Authorization:
the credentials are the kubeconfig's alone. It serves until interrupted
(Ctrl+C).
`
	examples = `
  # Open the timeline in the default browser
  kubectl quanty ui

  # On a fixed port, without a browser: print the URL to open elsewhere on this machine
  kubectl quanty ui --port 8090 --no-browser

  # As another user, through a given context
  kubectl quanty ui --context prod --as jane
`
)

// Options are ui's flags and what they resolve to.
type Options struct {
	Address   string
	Port      int
	NoBrowser bool

	config *rest.Config
	genericiooptions.IOStreams
}

// NewOptions are ui's defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{Address: "127.0.0.1", IOStreams: streams}
}

// NewCmdUI is kubectl quanty ui.
func NewCmdUI(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:     "ui [--address 127.0.0.1] [--port N] [--no-browser]",
		Short:   short,
		Long:    long,
		Example: examples,
		Args:    cobra.NoArgs,
		// It takes no arguments: nothing to complete, not even a file.
		ValidArgsFunction: cobra.NoFileCompletions,
		Annotations:       map[string]string{RESTConfigAnnotation: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.Address, "address", o.Address, "the loopback address to listen on (127.0.0.1, ::1 or localhost; no other: the proxy acts as you)")
	fs.IntVar(&o.Port, "port", o.Port, "the port to listen on (0: a random free one)")
	fs.BoolVar(&o.NoBrowser, "no-browser", false, "print the URL, do not open a browser")
	return cmd
}

// Complete reads the kubeconfig and kubectl's flags into the client
// configuration the proxy forwards with.
func (o *Options) Complete(f *util.Factory, args []string) error {
	cfg, err := f.ConfigFlags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("the kubeconfig: %w", err)
	}
	o.config = cfg
	return nil
}

// Validate checks the flags: a loopback address, a port.
func (o *Options) Validate() error {
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("--port %d: not a port (0 to 65535; 0: a random one)", o.Port)
	}
	if _, err := listenHost(o.Address); err != nil {
		return err
	}
	return nil
}

// listenHost is the IP --address names: localhost is 127.0.0.1, and any
// other must be a loopback IP, since whoever reaches the proxy acts with
// the user's credentials.
func listenHost(address string) (string, error) {
	if address == "localhost" {
		return "127.0.0.1", nil
	}
	ip := net.ParseIP(address)
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("--address %q: not a loopback address (127.0.0.1, ::1 or localhost): whoever reaches the proxy acts with your credentials", address)
	}
	return ip.String(), nil
}

// NewToken is a session's token: 32 random bytes, base64 for URLs.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("a session token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Run listens, prints the URL, opens the browser and serves until ctx
// ends; then it stops accepting and ends what is in flight (a watch does
// not end by itself).
func (o *Options) Run(ctx context.Context) error {
	host, err := listenHost(o.Address)
	if err != nil {
		return err
	}
	target, _, err := rest.DefaultServerUrlFor(o.config)
	if err != nil {
		return fmt.Errorf("the kubeconfig's server: %w", err)
	}
	transport, err := rest.TransportFor(o.config)
	if err != nil {
		return fmt.Errorf("the kubeconfig's credentials: %w", err)
	}
	token, err := NewToken()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("listen on %s port %d: %w", host, o.Port, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	errOut := &lockedWriter{w: o.ErrOut}
	proxy := NewProxy(token, target, transport, host, port, errOut)
	url := "http://" + net.JoinHostPort(host, port) + "/s/" + token + Page

	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	srv := &http.Server{
		Handler:           proxy,
		ReadHeaderTimeout: 10 * time.Second,
		// Errors of the server itself name no URL; the token stays out of
		// them either way.
		ErrorLog:    log.New(errOut, "kubectl quanty ui: ", 0),
		BaseContext: func(net.Listener) context.Context { return serveCtx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	fmt.Fprintln(o.Out, url)
	fmt.Fprintf(errOut, "Serving the history of %s at the URL above, as you: anyone with it acts as you until this stops (Ctrl+C).\n", target.Host)
	if !o.NoBrowser {
		openBrowser(url, errOut)
	}

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Watches and other requests in flight end with their context; then
	// the server closes.
	stopServing()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// lockedWriter serializes writes from the server's goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
