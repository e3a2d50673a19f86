package util

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/client"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// Cluster is one command's view of the cluster: the History API, the
// discovery documents, kube-apiserver's storage keys, and the namespace,
// each read once.
type Cluster struct {
	History   *api.History
	Discovery *discovery.Discovery
	Keys      *storagekey.Table
	// EtcdPrefix is kube-apiserver's --etcd-prefix, the keys' prefix.
	EtcdPrefix string

	client client.Interface
	nsFlag string // -n as given
	ns     string // the namespace, once known
}

// Namespace is -n, or the context's namespace as kubectl would use it.
func (c *Cluster) Namespace(ctx context.Context) (string, error) {
	if c.ns != "" {
		return c.ns, nil
	}
	if c.nsFlag != "" {
		c.ns = c.nsFlag
		return c.ns, nil
	}
	ns, err := c.client.ContextNamespace(ctx)
	c.ns = ns
	return ns, err
}

// NamespaceGiven reports whether -n was given.
func (c *Cluster) NamespaceGiven() bool { return c.nsFlag != "" }

// Target resolves TYPE/NAME (or TYPE NAME) through discovery, or takes
// --key as it is.
func (c *Cluster) Target(ctx context.Context, args []string, key string) (Target, error) {
	if key != "" {
		if len(args) > 0 {
			return Target{}, errors.New("give either TYPE/NAME or --key, not both")
		}
		t := Target{Key: key}
		if o, ok := c.Keys.Parse([]byte(key)); ok {
			t.Object = o
		}
		return t, nil
	}
	var typ, name string
	switch {
	case len(args) == 1 && strings.Count(args[0], "/") == 1:
		typ, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2 && !strings.Contains(args[0], "/"):
		typ, name = args[0], args[1]
	default:
		return Target{}, errors.New("want one object: TYPE/NAME (or TYPE NAME), or --key KEY")
	}
	if typ == "" || name == "" {
		return Target{}, fmt.Errorf("%q: want TYPE/NAME", strings.Join(args, " "))
	}
	res, err := c.Discovery.Resolve(ctx, typ)
	if err != nil {
		return Target{}, err
	}
	return c.TargetOf(ctx, res, name)
}

// TargetOf is the object name of res, in the command's namespace if res
// is namespaced.
func (c *Cluster) TargetOf(ctx context.Context, res discovery.Resource, name string) (Target, error) {
	ns := ""
	if res.Namespaced {
		var err error
		if ns, err = c.Namespace(ctx); err != nil {
			return Target{}, err
		}
	}
	return TargetIn(c.Keys, res, name, ns)
}

// Types resolves TYPE arguments (each may be a comma-separated list, as
// kubectl get takes), as kubectl does; an unknown one is kubectl's error.
func (c *Cluster) Types(ctx context.Context, args []string) ([]discovery.Resource, error) {
	var rs []discovery.Resource
	for _, a := range args {
		for _, typ := range strings.Split(a, ",") {
			if typ == "" {
				continue
			}
			if strings.Contains(typ, "/") {
				return nil, fmt.Errorf("%q: want a type (TYPE[,TYPE...]), not TYPE/NAME", typ)
			}
			r, err := c.Discovery.Resolve(ctx, typ)
			if err != nil {
				return nil, err
			}
			rs = append(rs, r)
		}
	}
	return rs, nil
}
