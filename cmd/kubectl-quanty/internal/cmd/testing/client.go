package testing

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/client"
)

// Client is the fake client.Interface: discovery from Discovery's
// documents, the aggregated API through the front proxy as the user --as
// names (the cluster's admin, in system:masters, without it), errors as
// kubectl reports them.
type Client struct {
	c      *Cluster
	user   string
	groups []string

	mu   sync.Mutex
	reqs []string
}

var _ client.Interface = (*Client)(nil)

func (c *Cluster) newClient(kubectlFlags *pflag.FlagSet) (client.Interface, error) {
	cl := &Client{c: c}
	if kubectlFlags.Lookup("as") != nil {
		cl.user, _ = kubectlFlags.GetString("as")
		cl.groups, _ = kubectlFlags.GetStringArray("as-group")
	}
	if cl.user == "" {
		// The cluster's admin, in system:masters as kubeadm's and k3s's
		// admin kubeconfigs are: the raw-access group.
		cl.user, cl.groups = "admin", append(cl.groups, "system:masters")
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl, nil
}

// Client is a fake client of the cluster's admin.
func (c *Cluster) Client() *Client {
	cl, _ := c.newClient(pflag.NewFlagSet("none", pflag.ContinueOnError))
	return cl.(*Client)
}

// Get is a GET of path.
func (cl *Client) Get(ctx context.Context, path string) ([]byte, error) {
	return cl.do(ctx, http.MethodGet, path, nil)
}

// Post is a POST of body to path.
func (cl *Client) Post(ctx context.Context, path string, body []byte) ([]byte, error) {
	return cl.do(ctx, http.MethodPost, path, body)
}

// ContextNamespace is the cluster's ContextNamespace.
func (cl *Client) ContextNamespace(context.Context) (string, error) {
	return cl.c.ContextNamespace, nil
}

func (cl *Client) requests() []string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]string(nil), cl.reqs...)
}

func (cl *Client) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	cl.mu.Lock()
	cl.reqs = append(cl.reqs, method+" "+path)
	cl.mu.Unlock()
	status, answer, err := cl.c.Answer(ctx, method, path, body, cl.user, cl.groups)
	if err != nil {
		return nil, err
	}
	if status/100 == 2 {
		return answer, nil
	}
	return nil, StatusError(answer)
}

// StatusError is the error kubectl reports for an answer that is not a
// success: the Status's reason and message, or, for a body that is not a
// Status, kubectl's own words.
func StatusError(answer []byte) error {
	var st metav1.Status
	if json.Unmarshal(answer, &st) != nil || st.Kind != "Status" {
		return &client.StatusError{Message: fmt.Sprintf("an error on the server (%q) has prevented the request from succeeding", answer)}
	}
	return &client.StatusError{Reason: string(st.Reason), Message: st.Message}
}

// notFound is kube-apiserver's answer for a path nothing serves.
const notFound = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`

// Answer answers a request as kube-apiserver would: discovery from the
// documents, the aggregated API through the front proxy as user and
// groups.
func (c *Cluster) Answer(ctx context.Context, method, path string, body []byte, user string, groups []string) (int, []byte, error) {
	if !strings.HasPrefix(path, api.Base+"/") || c.NoAPIService {
		if d, ok := Discovery()[path]; ok && method == http.MethodGet {
			b, err := json.Marshal(d)
			return http.StatusOK, b, err
		}
		return http.StatusNotFound, []byte(notFound), nil
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if user == "" {
		user, groups = "admin", append(groups, "system:masters")
	}
	req.Header.Set("X-Remote-User", user)
	for _, g := range append(groups, "system:authenticated") {
		req.Header.Add("X-Remote-Group", g)
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp.StatusCode, answer, err
}

// httpClient is the front proxy's client: kube-apiserver's
// --proxy-client-cert-file, trusting the API's serving CA.
type httpClient = http.Client

func newHTTPClient(caFile, certFile, keyFile string) (*httpClient, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}}}, nil
}
