// Package e2e runs a real kube-apiserver and kube-controller-manager on
// QuantyKube and checks, through client-go (and kubectl where kubectl
// itself is what is tested), that Kubernetes works on it: once on SQLite
// (one QuantyKube process) and once on PostgreSQL with two QuantyKube
// replicas sharing the database, kube-apiserver's --etcd-servers naming
// both so that its writes and watches cross replicas.
//
// StartCluster builds (once per machine, scripts/kubernetes.sh) and starts
// the cluster; a check is a function of a *Cluster, run as one subtest:
//
//	go test -run 'TestKubernetes/postgres/history' .
//
// runs one check on one backend. It is a nested module so that client-go
// and the Kubernetes API types never enter QuantyKube's own go.mod.
package e2e
