// Package integration holds QuantyKube's integration tests. They speak to a
// running server through the real etcd client (go.etcd.io/etcd/client/v3)
// and assert etcd's real behaviour: revisions, counts, values and the exact
// error texts that kube-apiserver and other clients match on.
//
// By default every test starts an in-process QuantyKube on a fresh SQLite
// file. With QUANTY_TEST_ETCD_BIN=/path/to/etcd every test instead starts that
// etcd binary with a fresh --data-dir on free loopback ports, so the same
// assertions can be checked against the reference implementation:
//
//	QUANTY_TEST_ETCD_BIN=/tmp/etcd go test ./test/integration/
//
// Otherwise the suite is a matrix over the storage backends (backend_test.go):
// after the SQLite pass, TestMain runs the same test binary again with
// QUANTY_TEST_BACKEND=postgres, each test server on a fresh PostgreSQL
// database made on QUANTY_TEST_POSTGRES_DSN's server or on a throwaway
// cluster started from /usr/lib/postgresql/15/bin. Without either it prints
// POSTGRES TESTS SKIPPED (and fails under CI=true). One backend only:
//
//	QUANTY_TEST_SKIP_POSTGRES=1 go test ./test/integration/
//	QUANTY_TEST_BACKEND=postgres QUANTY_TEST_POSTGRES_DSN=postgres://... go test ./test/integration/
package integration
