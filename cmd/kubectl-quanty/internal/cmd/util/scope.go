package util

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/pkg/storagekey"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// Scope is every object of one resource in one namespace, or everywhere;
// after a scan, the log of its keys.
type Scope struct {
	Resource  discovery.Resource
	Namespace string
	Entries   []*historypb.LogEntry
	Err       error
}

// Prefix is the scope's storage prefix.
func (sc Scope) Prefix(tab *storagekey.Table) (string, error) {
	return tab.ScopePrefix(storagekey.Scope{Resource: sc.Resource.Resource, Namespace: sc.Namespace})
}

// Expiring reports whether r's objects expire by themselves
// (kube-apiserver gives events a lease): neither listed as deleted nor
// restored.
func Expiring(r discovery.Resource) bool {
	return r.Resource.Resource == "events" && (r.Group == "" || r.Group == "events.k8s.io")
}

// Scopes are the resources to scan: args' one TYPE, or every one
// (namespaced ones only, unless all) but those that expire, in namespace
// ns (every namespace when empty).
func (c *Cluster) Scopes(ctx context.Context, args []string, all bool, ns string) ([]Scope, error) {
	var rs []discovery.Resource
	if len(args) == 1 {
		r, err := c.Discovery.Resolve(ctx, args[0])
		if err != nil {
			return nil, err
		}
		rs = []discovery.Resource{r}
	} else {
		every, err := c.Discovery.All(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range every {
			if !Expiring(r) && (all || r.Namespaced) {
				rs = append(rs, r)
			}
		}
	}
	return c.ScopesOf(rs, ns), nil
}

// ScopesOf are the scopes of resources rs in namespace ns (every
// namespace when empty), each storage prefix once.
func (c *Cluster) ScopesOf(rs []discovery.Resource, ns string) []Scope {
	var scopes []Scope
	seen := map[string]bool{}
	for _, r := range rs {
		sc := Scope{Resource: r}
		if r.Namespaced {
			sc.Namespace = ns
		}
		p, err := sc.Prefix(c.Keys)
		if err != nil || seen[p] {
			continue // not stored by kube-apiserver, or already scanned
		}
		seen[p] = true
		scopes = append(scopes, sc)
	}
	return scopes
}

// Scan reads the log of every scope from the revision or time of from, a
// few at once.
func (c *Cluster) Scan(ctx context.Context, scopes []Scope, from *historypb.Request) []Scope {
	sem := make(chan struct{}, discovery.Parallelism)
	var wg sync.WaitGroup
	for i := range scopes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sc := &scopes[i]
			p, err := sc.Prefix(c.Keys)
			if err != nil {
				sc.Err = err
				return
			}
			// Every key with the prefix, which ends in '/': up to the next
			// character, '0'.
			sc.Entries, sc.Err = c.History.Log(ctx, &historypb.Request{
				Key: []byte(p), RangeEnd: []byte(strings.TrimSuffix(p, "/") + "0"),
				Revision: from.GetRevision(), UnixMs: from.GetUnixMs(),
			})
		})
	}
	wg.Wait()
	return scopes
}

// RescanWindow reads again, whole, the scopes whose log QuantyKube
// refused because the time asked is before their retention window (which
// may be shorter than others'): a --since older than what is retained
// asks for all of it.
func (c *Cluster) RescanWindow(ctx context.Context, scopes []Scope) {
	var at []int
	var again []Scope
	for i, sc := range scopes {
		if errors.Is(sc.Err, api.ErrOutsideRetention) {
			at = append(at, i)
			again = append(again, Scope{Resource: sc.Resource, Namespace: sc.Namespace})
		}
	}
	for i, sc := range c.Scan(ctx, again, &historypb.Request{}) {
		scopes[at[i]] = sc
	}
}

// ByKey splits a log over many keys into each key's, in the order the keys
// first appear.
func ByKey(entries []*historypb.LogEntry) (keys []string, logs map[string][]*historypb.LogEntry) {
	logs = map[string][]*historypb.LogEntry{}
	for _, e := range entries {
		k := string(e.GetKv().GetKey())
		if _, ok := logs[k]; !ok {
			keys = append(keys, k)
		}
		logs[k] = append(logs[k], e)
	}
	return keys, logs
}
