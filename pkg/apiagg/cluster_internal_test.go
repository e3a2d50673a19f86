package apiagg

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// apiCluster asks kube-apiserver's discovery for status subresources
// (once per group version within discoveryTTL), and holds a ClusterIP
// with an IPAddress naming the Service: kept when it names it already,
// an *IPHeldError when it names another, released only while it still
// names the Service.
func TestAPICluster(t *testing.T) {
	var mu sync.Mutex
	ips := map[string]ipAddress{}
	var asked []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, r.Method+" "+r.URL.Path)
		if r.Header.Get("Authorization") != "Bearer store-token" {
			t.Errorf("%s %s without the store's credentials", r.Method, r.URL.Path)
		}
		status := func(code int32, reason metav1.StatusReason) {
			w.WriteHeader(int(code))
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Code: code, Reason: reason})
		}
		switch {
		case r.URL.Path == "/api/v1":
			_ = json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "services"}, {Name: "services/status"}, {Name: "configmaps"}}})
		case r.URL.Path == "/apis/example.com/v1":
			status(404, metav1.StatusReasonNotFound)
		case r.Method == "POST" && r.URL.Path == ipAddresses:
			var ip ipAddress
			b, _ := io.ReadAll(r.Body)
			if err := json.Unmarshal(b, &ip); err != nil || ip.Kind != "IPAddress" || ip.Metadata.Labels["ipaddress.kubernetes.io/managed-by"] != "ipallocator.k8s.io" {
				t.Errorf("IPAddress %s (%v)", b, err)
			}
			if _, ok := ips[ip.Metadata.Name]; ok {
				status(409, metav1.StatusReasonAlreadyExists)
				return
			}
			ip.Metadata.UID = "uid-" + "x"
			ips[ip.Metadata.Name] = ip
			w.WriteHeader(201)
		case r.Method == "GET":
			ip, ok := ips[r.URL.Path[len(ipAddresses)+1:]]
			if !ok {
				status(404, metav1.StatusReasonNotFound)
				return
			}
			_ = json.NewEncoder(w).Encode(ip)
		case r.Method == "DELETE":
			delete(ips, r.URL.Path[len(ipAddresses)+1:])
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		}
	}))
	defer api.Close()
	c, err := newAPIClient(&rest.Config{Host: api.URL, BearerToken: "store-token"})
	if err != nil {
		t.Fatal(err)
	}
	a := newAPICluster(c)
	ctx := t.Context()
	for _, tc := range []struct {
		apiVersion, resource string
		want                 bool
	}{{"v1", "services", true}, {"v1", "configmaps", false}, {"v1", "services", true}, {"example.com/v1", "widgets", false}} {
		if got, err := a.HasStatus(ctx, tc.apiVersion, tc.resource); err != nil || got != tc.want {
			t.Errorf("HasStatus(%s, %s) = %v, %v; want %v", tc.apiVersion, tc.resource, got, err, tc.want)
		}
	}
	if len(asked) != 2 {
		t.Errorf("discovery asked %q, want each group version once", asked)
	}

	if created, err := a.HoldIP(ctx, "10.0.0.10", "ns1", "web"); err != nil || !created {
		t.Fatalf("HoldIP: %v %v", created, err)
	}
	if created, err := a.HoldIP(ctx, "10.0.0.10", "ns1", "web"); err != nil || created {
		t.Errorf("HoldIP again: %v %v, want held already", created, err)
	}
	var held *IPHeldError
	if _, err := a.HoldIP(ctx, "10.0.0.10", "ns2", "other"); !errors.As(err, &held) || held.Owner != "services ns1/web" {
		t.Errorf("HoldIP for another Service: %v", err)
	}
	if err := a.ReleaseIP(ctx, "10.0.0.10", "ns2", "other"); err != nil || len(ips) != 1 {
		t.Errorf("another Service's release: %v, %d held", err, len(ips))
	}
	if err := a.ReleaseIP(ctx, "10.0.0.10", "ns1", "web"); err != nil || len(ips) != 0 {
		t.Errorf("release: %v, %d held", err, len(ips))
	}
}
