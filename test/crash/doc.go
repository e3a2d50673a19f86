// Package crash holds QuantyKube's crash test: concurrent writers through the
// real etcd client, kill -9 of the server at a random moment under load,
// restart on the same SQLite file, repeated, checking after every restart
// that nothing acknowledged was lost, that revisions never repeat and that a
// watcher resumes with neither a gap nor a duplicate.
//
// TestMain builds ./cmd/quantykube into a temporary directory. Another server
// can be tested instead with QUANTY_CRASH_BIN and QUANTY_CRASH_ARGS, an
// argument template in which {addr} (client host:port), {peer} (a second free
// loopback host:port, fixed for the test), {dir} (a data directory, kept
// across restarts) and {db} ({dir}/state.db) are replaced, e.g. for kine:
//
//	QUANTY_CRASH_BIN=/tmp/kine QUANTY_CRASH_PAIRS=0 \
//	QUANTY_CRASH_ARGS='--listen-address {addr} --endpoint sqlite://{db} --metrics-bind-address 0' \
//	go test ./test/crash/
//
// Other knobs: QUANTY_CRASH_ROUNDS (kills, default 5), QUANTY_CRASH_SEED,
// QUANTY_CRASH_PAIRS=0 (no two-key Txns, for servers that support only
// kube-apiserver's Txn shapes). The test is skipped with -short.
package crash
