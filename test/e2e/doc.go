// Package e2e runs a real kube-apiserver and kube-controller-manager on
// QuantyKube and checks, through client-go (and kubectl where kubectl
// itself is what is tested), that Kubernetes works on it: once on SQLite
// (one QuantyKube process) and once on PostgreSQL with two QuantyKube
// replicas sharing the database, kube-apiserver's --etcd-servers naming
// both so that its writes and watches cross replicas.
//
// StartCluster builds the Kubernetes binaries (once per machine, through
// scripts/kubernetes.sh), generates the cluster's certificates and starts
// QuantyKube (test/framework), kube-apiserver and kube-controller-manager.
// A check is a func(*testing.T, *Cluster) listed in checks (e2e_test.go)
// and run as one subtest per cluster: it gets the admin's clients, the
// kubeconfig, the QuantyKube target (endpoints, etcd clients of each
// replica, restarts) and a namespace of its own (Cluster.Namespace), and
// must leave the cluster running. One check on one backend:
//
//	go test -run 'TestKubernetes/postgres/history' .
//
// The SQLite cluster also serves the aggregated API; its checks (api-*,
// apiagg_test.go) and kubectl quanty's (plugin-*, plugin_test.go) run
// there. The plugin's run the command lines docs/KUBECTL-QUANTY.md shows,
// with kubectl-quanty built from this checkout first on kubectl's PATH
// (Cluster.Shell), and hold its answers against the walk-through's.
//
// The Helm chart (deploy/chart/quantykube, docs/helm.md) is checked by
// helm v4 itself (helm.go builds it through scripts/helm.sh): without a
// cluster by TestChart* (chart_test.go: lint, refusals, its objects held
// against deploy/aggregated-api), on each cluster by chart-profiles
// (chartcluster_test.go: server-side dry runs under PodSecurity
// restricted) and on PostgreSQL's by chart-docs (chartdoc_test.go: the
// page's commands, run as written) and chart-run (chartrun_test.go: the
// store's container run as a process with the arguments, probes and
// files the chart gives it). The SQLite cluster's aggregated API is
// registered by the chart's external profile (apiagg.go).
//
// TestImport (import_test.go), TestMigrate (migrate_test.go) and
// TestBackupRestore (backup_test.go) are not checks: they stop
// kube-apiserver, move its datastore (`quantykube import` from a real etcd
// and from kine, Options.Datastore; `quantykube migrate` from SQLite to
// PostgreSQL, MySQL and SQLite again; `quantykube backup` and `restore`)
// and start it again on what they made.
//
// TestLostMachineUnderAPIServer (replicate_test.go) is issue 54's
// lost-machine drill under kube-apiserver: QuantyKube with --replicate
// killed under ConfigMap writes, its data directory deleted, `quantykube
// restore --from` and QuantyKube started again on the same address; the
// restored store is held against the writer's log, and what the same
// kube-apiserver and its watching clients do across the revision bump
// (relist, 410 Gone, no resourceVersion reused) is held against
// docs/backup.md.
//
// TestImage (image_test.go) builds the image make image builds, loads it
// into Debian's podman and runs it with runc (image.go): kube-apiserver
// runs on the host against the container (Options.EtcdServers), and the
// container's user, its stop on SIGTERM and its store on a mounted host
// directory across a new container are checked.
//
// It is a nested module so that client-go and the Kubernetes API types
// never enter QuantyKube's own go.mod.
package e2e
