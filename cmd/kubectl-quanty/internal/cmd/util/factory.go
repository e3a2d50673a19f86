// Package util is what kubectl-quanty's commands share, as kubectl's
// cmdutil is theirs: the Factory that turns the command line into the
// cluster a command reaches, TYPE/NAME resolved into a storage key, the
// points in history (--rev, --at), output flags, questions, and exit
// statuses.
package util

import (
	"time"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/api"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/client"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// Factory makes what a command needs from the command line and the
// process: the client (kubectl's global flags), kube-apiserver's storage
// prefix, the clock and whether diffs are painted.
type Factory struct {
	// ConfigFlags are kubectl's global flags as cli-runtime parses them,
	// with the deprecated --username and --password kubectl still takes
	// (ADR-024). The plugin passes those given on to every kubectl it
	// runs; ui alone builds a client-go transport from them (ADR-048).
	ConfigFlags *genericclioptions.ConfigFlags
	// KubectlFlags holds ConfigFlags' flags and no other.
	KubectlFlags *pflag.FlagSet
	// EtcdPrefix is kube-apiserver's --etcd-prefix.
	EtcdPrefix string

	// NewClient makes the client; nil: the kubectl on PATH.
	NewClient func(kubectlFlags *pflag.FlagSet) (client.Interface, error)
	// Now is the clock; Location the zone times are printed in.
	Now      func() time.Time
	Location *time.Location
	// Color paints diffs: standard output is a terminal, and NO_COLOR is
	// unset.
	Color bool
}

// NewFactory is a Factory on the kubectl on PATH, the local clock and
// zone, without color.
func NewFactory() *Factory {
	f := &Factory{
		ConfigFlags:  genericclioptions.NewConfigFlags(false).WithDeprecatedPasswordFlag(),
		KubectlFlags: pflag.NewFlagSet("kubectl", pflag.ContinueOnError),
		EtcdPrefix:   storagekey.DefaultPrefix,
		Now:          time.Now,
		Location:     time.Local,
	}
	f.ConfigFlags.AddFlags(f.KubectlFlags)
	return f
}

// NamespaceFlag is -n as given, "" without it.
func (f *Factory) NamespaceFlag() string {
	if f.ConfigFlags.Namespace == nil {
		return ""
	}
	return *f.ConfigFlags.Namespace
}

// Client is the client of the cluster the flags name.
func (f *Factory) Client() (client.Interface, error) {
	if f.NewClient != nil {
		return f.NewClient(f.KubectlFlags)
	}
	return client.NewKubectl(f.KubectlFlags)
}

// Cluster is what a command reaches through the client.
func (f *Factory) Cluster() (*Cluster, error) {
	c, err := f.Client()
	if err != nil {
		return nil, err
	}
	return &Cluster{
		History:    api.New(c),
		Discovery:  discovery.New(c),
		Keys:       storagekey.New(f.EtcdPrefix),
		EtcdPrefix: f.EtcdPrefix,
		client:     c,
		nsFlag:     f.NamespaceFlag(),
	}, nil
}

// Clock prints times as the commands do.
func (f *Factory) Clock() Clock { return Clock{now: f.Now, loc: f.Location} }
