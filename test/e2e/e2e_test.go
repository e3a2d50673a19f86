package e2e

import (
	"slices"
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// Check is one end-to-end check, run as a subtest of each backend's
// cluster. A check makes what it needs (Cluster.Namespace gives it a
// namespace of its own), so that it can run alone, and leaves the cluster
// running.
type Check struct {
	Name string
	Run  func(t *testing.T, c *Cluster)
}

// checks run in this order on each cluster; restart sits in the middle so
// that the checks after it run on a restarted cluster.
var checks = []Check{
	{"version", checkVersion},
	{"namespaces", checkNamespaces},
	{"configmaps", checkConfigMaps},
	{"secrets", checkSecrets},
	{"paged-list", checkPagedList},
	{"kubectl-chunked-list", checkKubectlChunkedList},
	{"watch", checkWatch},
	{"watch-resume", checkWatchResume},
	{"watch-store-writes", checkWatchStoreWrites},
	{"crd", checkCRD},
	{"event-ttl", checkEventTTL},
	{"restart", checkRestart},
	{"namespace-deletion", checkNamespaceDeletion},
	{"history", checkHistory},
}

// clusters are the two datastores Kubernetes runs on: SQLite in one
// process, serving the aggregated API from a network namespace of the
// test's own, and one PostgreSQL database behind two replicas on loopback.
var clusters = []Options{
	{Backend: framework.SQLite, AggregatedAPI: true},
	{Backend: framework.Postgres, Replicas: 2},
}

func TestKubernetes(t *testing.T) {
	for _, o := range clusters {
		t.Run(string(o.Backend), func(t *testing.T) {
			c := StartCluster(t, o)
			for _, ck := range clusterChecks(o) {
				t.Run(ck.Name, func(t *testing.T) { ck.Run(t, c) })
			}
		})
	}
}

// clusterChecks are the checks of one cluster: the aggregated API's and
// kubectl quanty's come before namespace deletion (which must complete
// with the API registered), but the one that unregisters it, which comes
// last.
//
// The chart's checks come after the cluster's own: chart-profiles (dry
// runs) on both, chart-docs (real installs, which own the APIService
// while they last) only where no aggregated API is registered.
func clusterChecks(o Options) []Check {
	if !o.AggregatedAPI {
		return slices.Concat(checks, chartChecks, chartInstallChecks)
	}
	var out []Check
	for _, ck := range checks {
		if ck.Name == "namespace-deletion" {
			out = append(append(out, apiChecks...), pluginChecks...)
		}
		out = append(out, ck)
	}
	return slices.Concat(out, chartChecks, pluginLastChecks)
}
