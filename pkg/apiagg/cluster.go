package apiagg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Cluster is what a restore asks kube-apiserver with the store's own
// credentials, beside the caller's access reviews and dry runs: which
// resources have a status subresource, and the holding of a re-created
// Service's ClusterIPs in kube-apiserver's allocator.
type Cluster interface {
	// HasStatus reports whether kube-apiserver serves resource, in the
	// group and version of apiVersion, with a status subresource.
	HasStatus(ctx context.Context, apiVersion, resource string) (bool, error)
	// HoldIP makes kube-apiserver's ClusterIP allocator hold ip for the
	// Service namespace/name: an IPAddress object naming the Service as
	// its parent, as kube-apiserver makes one when it allocates the IP.
	// created is false when one was there already; another parent's is an
	// *IPHeldError.
	HoldIP(ctx context.Context, ip, namespace, name string) (created bool, err error)
	// ReleaseIP removes what HoldIP created, if it still names the Service.
	ReleaseIP(ctx context.Context, ip, namespace, name string) error
}

// IPHeldError is a ClusterIP that kube-apiserver's allocator holds for
// another object.
type IPHeldError struct {
	IP, Owner string
}

func (e *IPHeldError) Error() string {
	return fmt.Sprintf("the ClusterIP %s is held by %s", e.IP, e.Owner)
}

// apiClient makes requests to kube-apiserver with the store's own
// credentials (a kubeconfig or the pod's service account).
type apiClient struct {
	host string
	rt   http.RoundTripper
}

func newAPIClient(cfg *rest.Config) (*apiClient, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for kube-apiserver: %w", err)
	}
	host, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for kube-apiserver: %w", err)
	}
	return &apiClient{host: strings.TrimSuffix(host.String(), "/"), rt: rt}, nil
}

// do sends a request and decodes a 2xx answer into out (nil: none read);
// any other answer is kube-apiserver's Status as an error.
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.host+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", jsonContentType)
	req.Header.Set("Content-Type", jsonContentType)
	req.Header.Set("User-Agent", "quantykube-aggregated-api")
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		if out == nil {
			return nil
		}
		return json.Unmarshal(b, out)
	}
	var st metav1.Status
	if json.Unmarshal(b, &st) != nil || st.Kind != "Status" {
		return fmt.Errorf("%s %s: kube-apiserver answered %s", method, path, resp.Status)
	}
	return statusError{st}
}

// statusError is kube-apiserver's Status answer to the store's own
// request.
type statusError struct{ metav1.Status }

func (e statusError) Error() string { return e.Message }

func codeOf(err error) int32 {
	var se statusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// apiCluster is Cluster through kube-apiserver's REST API, with the
// resource lists of discovery kept for discoveryTTL: a CRD that gains or
// loses its status subresource is seen within that.
type apiCluster struct {
	c *apiClient

	mu    sync.Mutex
	lists map[string]discovered // group/version -> its resources
}

type discovered struct {
	status map[string]bool // resources with a status subresource
	at     time.Time
}

const discoveryTTL = 5 * time.Minute

func newAPICluster(c *apiClient) *apiCluster {
	return &apiCluster{c: c, lists: map[string]discovered{}}
}

func (a *apiCluster) HasStatus(ctx context.Context, apiVersion, resource string) (bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || gv.Version == "" {
		return false, fmt.Errorf("apiVersion %q is not group/version", apiVersion)
	}
	a.mu.Lock()
	d, ok := a.lists[gv.String()]
	a.mu.Unlock()
	if ok && time.Since(d.at) < discoveryTTL {
		return d.status[resource], nil
	}
	path := "/apis/" + gv.String()
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	var list metav1.APIResourceList
	switch err := a.c.do(ctx, http.MethodGet, path, nil, &list); {
	case codeOf(err) == http.StatusNotFound:
		// Not served (a CRD since removed): no status subresource either.
	case err != nil:
		return false, fmt.Errorf("discovery of %s: %w", gv, err)
	}
	d = discovered{status: map[string]bool{}, at: time.Now()}
	for _, r := range list.APIResources {
		if res, sub, ok := strings.Cut(r.Name, "/"); ok && sub == "status" {
			d.status[res] = true
		}
	}
	a.mu.Lock()
	a.lists[gv.String()] = d
	a.mu.Unlock()
	return d.status[resource], nil
}

// ipAddress is networking.k8s.io/v1's IPAddress, as far as the store
// writes and reads it (the store links no API types: ADR-010).
type ipAddress struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		ParentRef *parentRef `json:"parentRef"`
	} `json:"spec"`
}

type parentRef struct {
	Group     string `json:"group"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (p *parentRef) String() string {
	if p == nil {
		return "no parent"
	}
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Namespace != "" {
		return fmt.Sprintf("%s %s/%s", r, p.Namespace, p.Name)
	}
	return r + " " + p.Name
}

const ipAddresses = "/apis/networking.k8s.io/v1/ipaddresses"

func (a *apiCluster) HoldIP(ctx context.Context, ip, namespace, name string) (bool, error) {
	family := "IPv4"
	if strings.Contains(ip, ":") {
		family = "IPv6"
	}
	want := &parentRef{Resource: "services", Namespace: namespace, Name: name}
	obj := ipAddress{APIVersion: "networking.k8s.io/v1", Kind: "IPAddress", Metadata: metav1.ObjectMeta{
		Name: ip,
		// The labels kube-apiserver's allocator puts on its own.
		Labels: map[string]string{"ipaddress.kubernetes.io/ip-family": family, "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"},
	}}
	obj.Spec.ParentRef = want
	err := a.c.do(ctx, http.MethodPost, ipAddresses, obj, nil)
	if codeOf(err) != http.StatusConflict {
		return err == nil, err
	}
	var have ipAddress
	if err := a.c.do(ctx, http.MethodGet, ipAddresses+"/"+url.PathEscape(ip), nil, &have); err != nil {
		return false, err
	}
	if p := have.Spec.ParentRef; p != nil && *p == *want {
		return false, nil
	}
	return false, &IPHeldError{IP: ip, Owner: have.Spec.ParentRef.String()}
}

func (a *apiCluster) ReleaseIP(ctx context.Context, ip, namespace, name string) error {
	var have ipAddress
	err := a.c.do(ctx, http.MethodGet, ipAddresses+"/"+url.PathEscape(ip), nil, &have)
	if codeOf(err) == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if p := have.Spec.ParentRef; p == nil || *p != (parentRef{Resource: "services", Namespace: namespace, Name: name}) {
		return nil
	}
	uid := have.Metadata.UID
	opts := metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}, Preconditions: &metav1.Preconditions{UID: &uid}}
	err = a.c.do(ctx, http.MethodDelete, ipAddresses+"/"+url.PathEscape(ip), opts, nil)
	if codeOf(err) == http.StatusNotFound || codeOf(err) == http.StatusConflict {
		return nil
	}
	return err
}
