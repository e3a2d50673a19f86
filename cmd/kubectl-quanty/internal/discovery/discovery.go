// Package discovery resolves TYPE as kubectl resolves it: through the API
// server's discovery documents (read through a client.Interface), each
// resource then mapped to kube-apiserver's storage keys by pkg/storagekey.
package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/client"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// Resource is one resource of the discovery documents that holds
// objects (it has the get verb).
type Resource struct {
	storagekey.Resource
	Version, Kind, Singular string
	ShortNames              []string
}

// GroupVersion is the apiVersion of its objects.
func (r Resource) GroupVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// TypeName is how kubectl names the type in -o name output: the kind in
// lower case, with the group when it has one.
func (r Resource) TypeName() string {
	if r.Group == "" {
		return strings.ToLower(r.Kind)
	}
	return strings.ToLower(r.Kind) + "." + r.Group
}

// Matches reports whether name (lower case) names r, as a plural, a
// singular, a kind or a short name.
func (r Resource) Matches(name string) bool {
	return r.Resource.Resource == name || r.Singular == name || strings.ToLower(r.Kind) == name || slices.Contains(r.ShortNames, name)
}

// Parallelism bounds the requests (kubectl processes) reading group
// discovery documents at once.
const Parallelism = 4

// Discovery reads the documents once per command.
type Discovery struct {
	c client.Interface

	mu     sync.Mutex
	core   []Resource
	groups []metav1.APIGroup // nil until read
	byGV   map[string][]Resource
	errs   map[string]error // group-versions that could not be read
}

// New is the discovery of the cluster c reaches.
func New(c client.Interface) *Discovery {
	return &Discovery{c: c, byGV: map[string][]Resource{}, errs: map[string]error{}}
}

// resourceList reads one group-version's APIResourceList: its resources
// that hold objects.
func (d *Discovery) resourceList(ctx context.Context, path, group, version string) ([]Resource, error) {
	out, err := d.c.Get(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("discovery %s: %w", path, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("discovery %s: not an APIResourceList: %w", path, err)
	}
	return objectResources(&list, group, version), nil
}

// objectResources are the resources of list that hold objects of their
// own: not subresources, and readable with get.
func objectResources(list *metav1.APIResourceList, group, version string) []Resource {
	var rs []Resource
	for _, r := range list.APIResources {
		if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "get") {
			continue
		}
		singular := r.SingularName
		if singular == "" {
			singular = strings.ToLower(r.Kind)
		}
		rs = append(rs, Resource{
			Resource: storagekey.Resource{Group: group, Resource: r.Name, Namespaced: r.Namespaced},
			Version:  version, Kind: r.Kind, Singular: singular, ShortNames: r.ShortNames,
		})
	}
	return rs
}

func (d *Discovery) loadCore(ctx context.Context) ([]Resource, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.core != nil {
		return d.core, nil
	}
	rs, err := d.resourceList(ctx, "/api/v1", "", "v1")
	if err != nil {
		return nil, err
	}
	d.core = rs
	return rs, nil
}

func (d *Discovery) loadGroups(ctx context.Context) ([]metav1.APIGroup, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.groups != nil {
		return d.groups, nil
	}
	out, err := d.c.Get(ctx, "/apis")
	if err != nil {
		return nil, fmt.Errorf("discovery /apis: %w", err)
	}
	var list metav1.APIGroupList
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("discovery /apis: not an APIGroupList: %w", err)
	}
	d.groups = list.Groups
	if d.groups == nil {
		d.groups = []metav1.APIGroup{}
	}
	return d.groups, nil
}

// loadVersions reads the preferred version of each group, a few at once,
// and returns their resources in the order of /apis. A group that cannot
// be read (an aggregated API that is down) is left out and remembered.
func (d *Discovery) loadVersions(ctx context.Context, groups []metav1.APIGroup) []Resource {
	sem := make(chan struct{}, Parallelism)
	var wg sync.WaitGroup
	for _, g := range groups {
		gv := g.PreferredVersion
		d.mu.Lock()
		_, done := d.byGV[gv.GroupVersion]
		d.mu.Unlock()
		if done {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			rs, err := d.resourceList(ctx, "/apis/"+gv.GroupVersion, g.Name, gv.Version)
			d.mu.Lock()
			defer d.mu.Unlock()
			if err != nil {
				d.errs[gv.GroupVersion] = err
				rs = []Resource{}
			}
			d.byGV[gv.GroupVersion] = rs
		}()
	}
	wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	var all []Resource
	for _, g := range groups {
		all = append(all, d.byGV[g.PreferredVersion.GroupVersion]...)
	}
	return all
}

// All is every resource that holds objects, the core group's first.
func (d *Discovery) All(ctx context.Context) ([]Resource, error) {
	core, err := d.loadCore(ctx)
	if err != nil {
		return nil, err
	}
	groups, err := d.loadGroups(ctx)
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(core), d.loadVersions(ctx, groups)...), nil
}

// failures says which group-versions could not be read, for an error
// that may be due to them.
func (d *Discovery) failures() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var s []string
	for gv, err := range d.errs {
		s = append(s, fmt.Sprintf("%s (%v)", gv, err))
	}
	slices.Sort(s)
	if len(s) == 0 {
		return ""
	}
	return "; discovery failed for " + strings.Join(s, ", ")
}

// Resolve finds the resource TYPE names, as kubectl does: a plural,
// singular, kind or short name, optionally qualified as NAME.GROUP or
// NAME.VERSION.GROUP, case-insensitive; the core group first, then the
// groups in the API server's order.
func (d *Discovery) Resolve(ctx context.Context, typ string) (Resource, error) {
	typ = strings.ToLower(strings.TrimSpace(typ))
	if typ == "" || strings.ContainsAny(typ, "/ ") {
		return Resource{}, fmt.Errorf("%q is not a resource type", typ)
	}
	name, qual, qualified := strings.Cut(typ, ".")
	if !qualified {
		core, err := d.loadCore(ctx)
		if err != nil {
			return Resource{}, err
		}
		if r, ok := find(core, name, ""); ok {
			return r, nil
		}
	}
	groups, err := d.loadGroups(ctx)
	if err != nil {
		return Resource{}, err
	}
	var want []metav1.APIGroup
	version := ""
	for _, g := range groups {
		switch {
		case !qualified:
			want = append(want, g)
		case g.Name == qual:
			want = append(want, g)
		case strings.HasSuffix(qual, "."+g.Name):
			// NAME.VERSION.GROUP: that version, if the group serves it.
			v := strings.TrimSuffix(qual, "."+g.Name)
			for _, gv := range g.Versions {
				if gv.Version == v {
					g.PreferredVersion, version = gv, v
					want = append(want, g)
				}
			}
		}
	}
	if r, ok := find(d.loadVersions(ctx, want), name, version); ok {
		return r, nil
	}
	return Resource{}, fmt.Errorf("the server doesn't have a resource type %q%s", typ, d.failures())
}

func find(rs []Resource, name, version string) (Resource, bool) {
	for _, r := range rs {
		if r.Matches(name) && (version == "" || r.Version == version) {
			return r, true
		}
	}
	return Resource{}, false
}

// ByKind finds the resource of objects of apiVersion and kind (an owner
// reference's), in the group the apiVersion names.
func (d *Discovery) ByKind(ctx context.Context, apiVersion, kind string) (Resource, error) {
	group, _, hasGroup := strings.Cut(apiVersion, "/")
	var rs []Resource
	var err error
	if hasGroup {
		rs, err = d.All(ctx)
	} else {
		group = ""
		rs, err = d.loadCore(ctx)
	}
	if err != nil {
		return Resource{}, err
	}
	for _, r := range rs {
		if r.Kind == kind && r.Group == group {
			return r, nil
		}
	}
	return Resource{}, errors.New("the server doesn't serve the kind " + kind + " of " + apiVersion + d.failures())
}
