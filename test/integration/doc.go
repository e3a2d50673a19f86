// Package integration holds QuantyKube's integration tests. They speak to a
// running server through the real etcd client (go.etcd.io/etcd/client/v3)
// and assert etcd's real behaviour: revisions, counts, values and the exact
// error texts that kube-apiserver and other clients match on.
//
// Every test runs on every backend of test/framework, as subtests: an
// in-process QuantyKube on a fresh SQLite file (sqlite) and on a fresh
// PostgreSQL database (postgres), the same through a throwaway PgBouncer in
// transaction mode (pgbouncer), on a fresh MariaDB database (mysql), and a
// real etcd v3.6 process with a fresh data directory (etcd), the reference
// the same assertions are checked against. One test on one backend:
//
//	go test ./test/integration/ -run 'TestWatchKey/postgres'
//
// A test that only QuantyKube can pass says why it does not run on etcd.
package integration
