// Package testing is the commands' test cluster: a real store with
// History, served as the real aggregated API (pkg/apiagg) over HTTPS with
// the front proxy's certificate, objects written into it as kube-apiserver
// writes them, reached through a fake client.Interface (Client) in place
// of kubectl: the discovery documents of a small API server, and the
// aggregated API as kube-apiserver's aggregator forwards to it, with the
// caller from --as. Only the client is fake; a few tests run the real
// kubectl (internal/cmd's).
package testing

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/pkg/apiagg"
	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/history"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// Reviewer is the test cluster's authorizer: admin may do anything,
// others what Allow grants them, as apiagg.Access.String() renders it.
// It records each question as "user: access".
type Reviewer struct {
	mu    sync.Mutex
	Allow map[string][]string
	asked []string
}

// Review answers a SubjectAccessReview.
func (r *Reviewer) Review(_ context.Context, u user.Info, a apiagg.Access) (bool, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, u.GetName()+": "+a.String())
	return u.GetName() == "admin" || slices.Contains(r.Allow[u.GetName()], a.String()), "", nil
}

// Asked are the questions asked so far.
func (r *Reviewer) Asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

// acceptAll stands in for kube-apiserver's dry runs of restores: the
// commands' tests are about what they ask; the e2e suite holds a real
// kube-apiserver's answers (test/e2e/restoreguard_test.go).
type acceptAll struct{}

func (acceptAll) DryRun(context.Context, user.Info, apiagg.Write) error { return nil }

// Maker makes a command, as the NewCmd functions do.
type Maker func(*util.Factory, genericiooptions.IOStreams) *cobra.Command

// Cluster is a test cluster and the commands run against it.
type Cluster struct {
	T      *testing.T
	Store  *mvcc.Store
	Grants *Reviewer
	Dir    string
	// ContextNamespace is what the fake client says kubectl would use
	// without -n.
	ContextNamespace string
	// NoAPIService makes the aggregated API's paths answer 404, as
	// kube-apiserver does when the APIService is not registered.
	NoAPIService bool
	// Color is the Factory's: diffs painted as on a terminal.
	Color bool
	// RealKubectl makes the Factory's client the kubectl on PATH, as the
	// plugin's own, in place of the fake one.
	RealKubectl bool

	makers  []Maker
	api     string // the aggregated API's https URL
	httpc   *httpClient
	mu      sync.Mutex
	clients []*Client
}

// New is a test cluster on a new store, for the commands makers make; one
// maker that makes a command with subcommands is the root itself.
func New(t *testing.T, makers ...Maker) *Cluster {
	t.Helper()
	return NewOn(t, mvcc.Options{}, makers...)
}

// NewOn is New on a store with options o: a clock, retention rules.
func NewOn(t *testing.T, o mvcc.Options, makers ...Maker) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Grants: &Reviewer{Allow: map[string][]string{}}, Dir: t.TempDir(), ContextNamespace: "shop", makers: makers}
	d, err := sqlite.New("sqlite://"+filepath.Join(c.Dir, "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Store, err = mvcc.Open(context.Background(), d, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Store.Close() })

	serving := framework.NewCA(t, "serving-ca")
	cert, key := serving.Issue(t, framework.CertSpec{CommonName: "quantykube.kube-system.svc", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	front := framework.NewCA(t, "front-proxy-ca")
	srv, err := apiagg.New(apiagg.Config{
		Listen: "127.0.0.1:0", CertFile: cert, KeyFile: key, ClientCAFile: front.CertFile,
		Reviewer: c.Grants, DryRunner: acceptAll{}, Logger: slog.New(slog.NewTextHandler(&framework.LogBuffer{}, nil)),
	}, history.New(c.Store))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	proxyCert, proxyKey := front.Issue(t, framework.CertSpec{CommonName: "front-proxy-client", Client: true})
	c.api = "https://" + srv.Addr().String()
	if c.httpc, err = newHTTPClient(serving.CertFile, proxyCert, proxyKey); err != nil {
		t.Fatal(err)
	}
	return c
}

// Factory is a Factory whose client is a fake one on the cluster, whose
// clock is the real one and whose times are printed in UTC.
func (c *Cluster) Factory() *util.Factory {
	f := util.NewFactory()
	if !c.RealKubectl {
		f.NewClient = c.newClient
	}
	f.Location = time.UTC
	f.Color = c.Color
	return f
}

// Root is the command tree the cluster's makers make, on f and streams.
func (c *Cluster) Root(f *util.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	// As kubectl quanty prints: every stream through a Screen.
	streams.Out, streams.ErrOut = terminal.NewScreen(streams.Out), terminal.NewScreen(streams.ErrOut)
	if len(c.makers) == 1 {
		if cmd := c.makers[0](f, streams); cmd.HasSubCommands() {
			return cmd
		}
	}
	root := &cobra.Command{Use: "kubectl-quanty", Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl quanty"}}
	util.SetupRoot(root, f, streams)
	for _, m := range c.makers {
		root.AddCommand(m(f, streams))
	}
	return root
}

// Run runs the command line args with stdin as its input: the exit
// status and what it printed.
func (c *Cluster) Run(stdin string, args ...string) (int, string, string) {
	c.T.Helper()
	return c.RunIn(strings.NewReader(stdin), args...)
}

// RunIn is Run with in as standard input.
func (c *Cluster) RunIn(in io.Reader, args ...string) (int, string, string) {
	c.T.Helper()
	var out, errOut bytes.Buffer
	return c.RunTo(in, &out, &errOut, args...), out.String(), errOut.String()
}

// RunTo is Run with its own streams.
func (c *Cluster) RunTo(in io.Reader, out, errOut io.Writer, args ...string) int {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.RunContext(ctx, in, out, errOut, args...)
}

// RunContext is RunTo until ctx ends (an interrupt).
func (c *Cluster) RunContext(ctx context.Context, in io.Reader, out, errOut io.Writer, args ...string) int {
	streams := genericiooptions.IOStreams{In: in, Out: out, ErrOut: errOut}
	return util.Execute(ctx, c.Root(c.Factory(), streams), args)
}

// OK runs the command line and fails the test unless it exits 0: what it
// printed on standard output.
func (c *Cluster) OK(args ...string) string {
	c.T.Helper()
	code, out, errOut := c.Run("", args...)
	if code != 0 {
		c.T.Fatalf("kubectl quanty %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// AnswerAfter is standard input that answers only after Change has run:
// as if someone wrote while the question was on the screen.
type AnswerAfter struct {
	Change func()
	Answer io.Reader
}

func (a *AnswerAfter) Read(p []byte) (int, error) {
	if a.Change != nil {
		a.Change()
		a.Change = nil
	}
	return a.Answer.Read(p)
}

func (c *Cluster) txn(op *pb.RequestOp) int64 {
	c.T.Helper()
	resp, err := c.Store.Txn(context.Background(), &pb.TxnRequest{Success: []*pb.RequestOp{op}})
	if err != nil {
		c.T.Fatal(err)
	}
	return resp.Header.Revision
}

// Put writes value at key, as kube-apiserver writes an object: the
// revision.
func (c *Cluster) Put(key string, value []byte) int64 {
	return c.txn(&pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key), Value: value}}})
}

// Del deletes key: the revision.
func (c *Cluster) Del(key string) int64 {
	return c.txn(&pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}})
}

// Value is key's value now and its mod revision, nil if absent.
func (c *Cluster) Value(key string) ([]byte, int64) {
	c.T.Helper()
	resp, err := c.Store.Range(context.Background(), &pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		c.T.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision
}

// Requests are the paths the commands' clients asked for, GETs and POSTs,
// in order.
func (c *Cluster) Requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []string
	for _, cl := range c.clients {
		all = append(all, cl.requests()...)
	}
	return all
}
